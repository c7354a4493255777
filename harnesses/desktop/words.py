"""Label pools the families draw from: short, distinct words that fit small widgets."""

import re

APPS = (
    "Notes", "Mail", "Photos", "Music", "Calendar", "Files", "Editor", "Browser", "Terminal", "Settings",
    "Maps", "Weather", "Clock", "Chat", "Paint", "Tasks", "Contacts", "Camera", "Calculator", "News",
)  # fmt: skip

BUTTONS = (
    "Save", "Open", "Print", "Share", "Delete", "Send", "Export", "Import", "Copy", "Paste", "Undo", "Redo",
    "Help", "Search", "Refresh", "Upload", "Download", "Apply", "Reset", "Next", "Back", "Play", "Stop",
    "Pause", "Edit", "Rename", "Sync", "Login", "Logout", "Archive",
)  # fmt: skip

FIELDS = (
    "Name", "Email", "City", "Phone", "Title", "Username", "Company", "Country", "Subject", "Street",
    "Website", "Tag", "Nickname", "Color",
)  # fmt: skip

VALUES = (
    "maple", "river", "orange", "falcon", "silver", "garden", "winter", "pixel", "rocket", "lemon", "coffee",
    "harbor", "violet", "meadow", "summit", "copper", "breeze", "tiger", "cedar", "comet", "paris", "oslo",
    "blue sky", "red fox", "green tea",
)  # fmt: skip

MENUS = {
    "File": ("New", "Open", "Save", "Save As", "Print", "Export", "Close"),
    "Edit": ("Undo", "Redo", "Cut", "Copy", "Paste", "Select All", "Find"),
    "View": ("Zoom In", "Zoom Out", "Full Screen", "Sidebar", "Status Bar", "Ruler"),
    "Tools": ("Spelling", "Word Count", "Options", "Macros", "Extensions"),
    "Format": ("Bold", "Italic", "Underline", "Font", "Align Left", "Align Right"),
    "Help": ("About", "Manual", "Shortcuts", "Updates", "Feedback"),
}
"""Menu titles and their items; no item appears under two titles."""

OPTIONS = (
    "Wi-Fi", "Bluetooth", "Sound", "Dark mode", "Auto update", "Alerts", "Location", "Night light", "Sync",
    "Backup", "Spell check", "Autosave", "Animations", "Hotspot",
)  # fmt: skip

SLIDERS = ("Volume", "Brightness", "Contrast", "Speed", "Zoom", "Balance", "Bass", "Treble", "Opacity", "Size")

DIALOGS = (
    ("Update", "A new version is ready.", ("Install", "Later")),
    ("Warning", "Disk is almost full.", ("OK",)),
    ("Saved", "Your file was saved.", ("OK",)),
    ("Reminder", "Meeting in 10 minutes.", ("Snooze",)),
    ("Error", "Could not connect.", ("Retry", "Cancel")),
    ("Printer", "Printer is offline.", ("OK",)),
    ("Backup", "Backup finished.", ("OK",)),
    ("Battery", "Battery is low.", ("OK",)),
)
"""(title, message, buttons): every button also closes its dialog."""

LISTS = {
    "Fruits": (
        "Apple", "Apricot", "Avocado", "Banana", "Blueberry", "Cherry", "Coconut", "Date", "Fig", "Grape",
        "Guava", "Kiwi", "Lemon", "Lime", "Mango", "Melon", "Nectarine", "Olive", "Orange", "Papaya", "Peach",
        "Pear", "Plum", "Quince", "Raspberry", "Tangerine",
    ),
    "Cities": (
        "Amsterdam", "Athens", "Berlin", "Bogota", "Cairo", "Chicago", "Dublin", "Geneva", "Hanoi", "Havana",
        "Istanbul", "Jakarta", "Kyoto", "Lagos", "Lima", "Lisbon", "Madrid", "Manila", "Nairobi", "Osaka",
        "Oslo", "Paris", "Prague", "Quito", "Seoul", "Sydney", "Tokyo", "Vienna",
    ),
    "Animals": (
        "Badger", "Beaver", "Bison", "Camel", "Cheetah", "Dolphin", "Eagle", "Falcon", "Ferret", "Gecko",
        "Giraffe", "Hamster", "Heron", "Ibis", "Jaguar", "Koala", "Lemur", "Llama", "Moose", "Otter", "Panda",
        "Parrot", "Penguin", "Rabbit", "Salmon", "Tiger", "Walrus", "Zebra",
    ),
}  # fmt: skip
"""List titles and their items, each pool sorted as a list box would show it."""

FIRST_NAMES = ("Ada", "Ben", "Cleo", "Dan", "Eva", "Finn", "Gina", "Hugo", "Ines", "Jon", "Kira", "Leo", "Mia", "Nora")
LAST_NAMES = ("Park", "Stone", "Reyes", "Kim", "Novak", "Silva", "Berg", "Moss", "Cole", "Ito", "Shaw", "Lund")
DOMAINS = ("mail.io", "post.net", "web.org", "inbox.co")
FORMS = ("Sign up", "Register", "Newsletter", "Contact", "Join")
CONSENTS = ("Subscribe", "Accept terms", "Remember me", "Send receipt", "Get offers", "Join beta")

FILES = (
    "report.txt", "notes.md", "budget.xls", "photo.png", "song.mp3", "draft.doc", "todo.txt", "slides.ppt",
    "data.csv", "invoice.pdf", "logo.svg", "clip.mp4",
)  # fmt: skip
FOLDERS = ("Docs", "Music", "Work", "Trips", "Games", "Backup")
FILE_ACTIONS = ("Open", "Rename", "Copy", "Cut", "Delete", "Share", "Properties")

COLORS = (
    (220, 80, 70), (60, 140, 220), (70, 170, 90), (230, 150, 40), (150, 90, 200), (40, 160, 170),
    (210, 90, 150), (110, 120, 140),
)  # fmt: skip
"""Icon colours: saturated enough to read on every wallpaper."""
FOLDER_COLOR = (235, 190, 70)



def vocabulary() -> tuple[str, ...]:
    """Every word of the label pools (letters only, sorted): the words a tokenizer should hold
    whole for these tasks (``TinyModel.words``)."""
    texts = [*APPS, *BUTTONS, *FIELDS, *VALUES, *OPTIONS, *SLIDERS, *FIRST_NAMES, *LAST_NAMES, *DOMAINS, *FORMS]
    texts += [*CONSENTS, *FILES, *FOLDERS, *FILE_ACTIONS]
    texts += [text for title, message, buttons in DIALOGS for text in (title, message, *buttons)]
    texts += [text for pool in (MENUS, LISTS) for title, items in pool.items() for text in (title, *items)]
    return tuple(sorted({word for text in texts for word in re.findall(r"[A-Za-z]+", text)}))
