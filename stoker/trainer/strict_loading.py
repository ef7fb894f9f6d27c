"""``strict_loading``: whether loading weights into a module may leave keys out (Lightning's module attribute).

Read by the resume (``checkpointing.restore``) and by ``load_from_checkpoint``, whose ``strict`` argument it
decides when left out.
"""

from __future__ import annotations


class StrictLoading:
    """The ``strict_loading`` attribute of ``TrainingModule``."""

    _strict_loading: bool | None = None  # None: not chosen (strict)

    @property
    def strict_loading(self) -> bool:
        """Whether loading weights fails on missing or unexpected keys (a resumed fit; ``load_from_checkpoint``
        without ``strict``). Set it False for a module that saves only some of its weights."""
        return self._strict_loading in (None, True)

    @strict_loading.setter
    def strict_loading(self, strict: bool | None) -> None:
        self._strict_loading = strict

    def strict_for_loading(self, strict: bool | None) -> bool:
        """``load_from_checkpoint``'s ``strict``: None follows ``strict_loading``; contradicting a chosen one is a
        ``ValueError`` (Lightning's rule)."""
        if strict is not None and self._strict_loading is not None and bool(self._strict_loading) != strict:
            raise ValueError(f"You set `.load_from_checkpoint(..., strict={strict!r})` which is in conflict with "
                             f"`{type(self).__name__}.strict_loading={self._strict_loading!r}. Please set the same "
                             f"value for both of them. ({type(self).__name__}.load_from_checkpoint(..., "
                             f"strict={strict!r}) contradicts the module's strict_loading={self._strict_loading!r}: "
                             "pass the same value, or leave strict out to follow the module.)")
        return self.strict_loading if strict is None else strict
