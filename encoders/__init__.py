"""Vision encoder plug-ins: built-ins live here; users register their own by entry point."""
