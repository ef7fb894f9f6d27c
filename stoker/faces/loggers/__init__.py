"""Faces found under ``stoker.loggers`` (this folder is on its ``__path__``; see ``stoker/faces/__init__.py``)."""
