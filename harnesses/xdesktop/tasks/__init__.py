"""The task families of the xdesktop harness, by name."""

from harnesses.xdesktop.tasks.base import Episode, Family
from harnesses.xdesktop.tasks.calculator import ChangeSetting, ComputeToFile
from harnesses.xdesktop.tasks.editor import AppendLine, EditLine, ReplaceWord, WriteAndSave
from harnesses.xdesktop.tasks.files import CreateFolder, MoveFile, RenameFile
from harnesses.xdesktop.tasks.terminal import ListToFile, RunAndSave

FAMILIES: dict[str, Family] = {
    family.name: family
    for family in (
        WriteAndSave(),
        EditLine(),
        AppendLine(),
        ReplaceWord(),
        RunAndSave(),
        ListToFile(),
        RenameFile(),
        CreateFolder(),
        MoveFile(),
        ComputeToFile(),
        ChangeSetting(),
    )
}

__all__ = ["FAMILIES", "Episode", "Family"]
