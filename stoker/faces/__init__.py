"""Lightning's module paths that lie inside a core package (``pytorch_lightning.trainer.trainer`` renamed is
``stoker.trainer.trainer``): each is a thin face re-exporting from ``stoker/compat/``, kept here so that no core
module imports compat. ``stoker/faces/<package>/`` is on that core package's ``__path__``, so the path resolves."""
