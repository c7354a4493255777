"""Errors of multimodal items: each names the field, the bad value and what was expected."""


class ImageError(ValueError):
    """An image that cannot become canonical RGB pixels: corrupt data, a refused format or mode,
    a zero or oversized shape, or a decompression bomb."""
