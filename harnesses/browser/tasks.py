"""Task families of the browser harness.

Each family draws one episode from a seeded RNG: which app page to open, the parameters the page
is built from (names, products, values), the goal in words, and the ``target`` the app's
``window.__state()`` must hold, key by key, for the episode to count as solved. ``args`` keeps
the goal's values in structured form for the scripted oracle.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class Episode:
    family: str
    page: str
    """File under ``assets/web`` that the episode opens."""
    params: Mapping[str, str]
    """URL query parameters the page is built from."""
    goal: str
    target: Mapping[str, Any]
    """Top-level keys of ``window.__state()`` and the values that solve the episode."""
    args: Mapping[str, Any]
    """The goal's values, for the oracle."""

    def solved_by(self, state: Mapping[str, Any] | None) -> bool:
        return state is not None and all(state.get(key) == value for key, value in self.target.items())


FIRST_NAMES = (
    "Ana", "Ben", "Chloe", "David", "Elena", "Farid", "Grace", "Hugo", "Ines", "Jonas",
    "Kira", "Liam", "Maya", "Noah", "Olga", "Priya", "Quinn", "Rosa", "Sam", "Tariq",
)
LAST_NAMES = (
    "Silva", "Chen", "Novak", "Okafor", "Garcia", "Meyer", "Rossi", "Tanaka", "Khan", "Dubois",
    "Larsen", "Moreau", "Haddad", "Kowalski", "Walsh", "Ivanova", "Lopez", "Becker", "Sato", "Ortiz",
)
EMAIL_DOMAINS = ("example.com", "mail.test", "post.example.org")
FORMS = (
    ("Event registration", "Ticket type", ("Standard", "VIP", "Student", "Speaker")),
    ("Support request", "Topic", ("Billing", "Login problem", "Bug report", "Feature idea")),
    ("Newsletter signup", "Frequency", ("Daily", "Weekly", "Monthly")),
    ("Volunteer sign-up", "Team", ("Kitchen", "Reception", "Logistics", "Cleanup", "First aid")),
    ("Course enrolment", "Level", ("Beginner", "Intermediate", "Advanced")),
)
CHORES = (
    "Buy milk", "Call the dentist", "Water the plants", "Pay the rent", "Book flights",
    "Return library books", "Renew passport", "Clean the fridge", "Send birthday card",
    "Fix the bike", "Walk the dog", "Order printer ink", "Email the landlord", "Bake bread",
    "Update resume", "Recycle bottles", "Buy train tickets", "Change bed sheets",
)
SUBJECTS = (
    "Lunch on Friday", "Quarterly report draft", "Team offsite plans", "Invoice 2231",
    "Your library loan", "Weekend hiking trip", "Budget review", "New office keys",
    "Design feedback", "Conference tickets", "Birthday party", "Server maintenance window",
)
REPLIES = (
    "Thanks, sounds good to me.", "Got it, I will take a look today.", "Yes, count me in!",
    "Thanks for the update.", "Can we move this to next week?", "Looks great, thank you.",
)
MAIL_FOLDERS = ("Archive", "Work", "Personal")
PRODUCTS = (
    "Ceramic Mug", "Desk Lamp", "Wool Scarf", "Notebook Set", "Water Bottle", "Phone Stand",
    "Tea Sampler", "Canvas Tote", "Wall Clock", "Plant Pot", "Bamboo Cutlery", "Travel Pillow",
    "Pocket Knife", "Yoga Mat", "Coffee Grinder", "Rain Jacket",
)
STREETS = ("Oak Street", "Maple Avenue", "Harbour Road", "Mill Lane", "Station Road", "Elm Court")
CITIES = ("Springfield", "Riverton", "Lakeside", "Portsmouth", "Fairview", "Brookhaven")


def _person(rng: random.Random) -> str:
    return f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"


def form_fill(rng: random.Random) -> Episode:
    title, label, options = rng.choice(FORMS)
    name = _person(rng)
    email = f"{name.lower().replace(' ', '.')}@{rng.choice(EMAIL_DOMAINS)}"
    choice = rng.choice(options)
    updates = rng.random() < 0.5
    return Episode(
        family="form-fill",
        page="form.html",
        params={"title": title, "label": label, "options": "|".join(options)},
        goal=(
            f"Fill in the {title} form with name '{name}', email '{email}' and {label.lower()} '{choice}', "
            f"with 'Send me email updates' {'ticked' if updates else 'left unticked'}, then submit it."
        ),
        target={"submitted": {"name": name, "email": email, "choice": choice, "updates": updates}},
        args={"name": name, "email": email, "choice": choice, "updates": updates},
    )


def todo_manage(rng: random.Random) -> Episode:
    chores = rng.sample(CHORES, 6)
    new, items = chores[0], chores[1:]
    finish, remove = rng.sample(items, 2)
    done_at_start = [item for item in items if item not in (finish, remove) and rng.random() < 0.3]
    final = [{"text": item, "done": item in done_at_start or item == finish} for item in items if item != remove]
    return Episode(
        family="todo-manage",
        page="todo.html",
        params={"items": "|".join(items), "done": "|".join(done_at_start)},
        goal=f"In the task list, add '{new}', mark '{finish}' as done, and delete '{remove}'.",
        target={"items": [*final, {"text": new, "done": False}]},
        args={"add": new, "finish": finish, "remove": remove},
    )


def email_triage(rng: random.Random) -> Episode:
    senders = [f"{first} {last}" for first, last in zip(rng.sample(FIRST_NAMES, 6), rng.sample(LAST_NAMES, 6))]
    subjects = rng.sample(SUBJECTS, len(senders))
    index = rng.randrange(len(senders))
    sender, action = senders[index], rng.choice(("reply", "move", "star"))
    mails = [{"id": i, "folder": "Inbox", "starred": False} for i in range(len(senders))]
    sent: list[dict[str, str]] = []
    args: dict[str, Any] = {"sender": sender, "action": action}
    if action == "reply":
        args["reply"] = rng.choice(REPLIES)
        sent.append({"to": sender, "body": args["reply"]})
        goal = f"Reply to the email from {sender} with the message '{args['reply']}'."
    elif action == "move":
        args["folder"] = rng.choice(MAIL_FOLDERS)
        mails[index]["folder"] = args["folder"]
        goal = f"Move the email from {sender} to the {args['folder']} folder."
    else:
        mails[index]["starred"] = True
        goal = f"Star the email from {sender}."
    return Episode(
        family="email-triage",
        page="mail.html",
        params={"mails": "|".join(f"{s}:{subject}" for s, subject in zip(senders, subjects))},
        goal=goal,
        target={"mails": mails, "sent": sent},
        args=args,
    )


def shop_checkout(rng: random.Random) -> Episode:
    products = rng.sample(PRODUCTS, 10)
    prices = [f"{rng.randrange(4, 80)}.{rng.choice(('00', '50', '95', '99'))}" for _ in products]
    product, qty = rng.choice(products), rng.randint(1, 4)
    name = _person(rng)
    address = f"{rng.randint(2, 199)} {rng.choice(STREETS)}, {rng.choice(CITIES)}"
    return Episode(
        family="shop-checkout",
        page="shop.html",
        params={"products": "|".join(f"{p}:{price}" for p, price in zip(products, prices))},
        goal=f"Buy {qty} x '{product}' and check out with name '{name}' and address '{address}'.",
        target={"orders": [{"items": [{"name": product, "qty": qty}], "name": name, "address": address}]},
        args={"product": product, "qty": qty, "name": name, "address": address},
    )


FAMILIES: Mapping[str, Callable[[random.Random], Episode]] = {
    "form-fill": form_fill,
    "todo-manage": todo_manage,
    "email-triage": email_triage,
    "shop-checkout": shop_checkout,
}
