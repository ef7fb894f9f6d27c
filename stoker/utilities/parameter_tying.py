"""Lightning's ``utilities.parameter_tying`` for renamed scripts: find the parameters a module holds under several
names (tied weights) and tie them again after something made copies of them (a move to another device type can)."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

__all__ = ["find_shared_parameters", "set_shared_parameters"]


def find_shared_parameters(module: nn.Module) -> list[list[str]]:
    """The names under which ``module`` holds one parameter more than once, a list per parameter (in the module's
    order; ``[]`` when nothing is tied).

    Example:
        >>> find_shared_parameters(model)   # doctest: +SKIP
        [['encoder.embed.weight', 'decoder.out.weight']]
    """
    names: dict[int, list[str]] = {}
    for name, parameter in module.named_parameters(remove_duplicate=False):
        names.setdefault(id(parameter), []).append(name)
    return [group for group in names.values() if len(group) > 1]


def set_shared_parameters(module: nn.Module, shared: Sequence[Sequence[str]]) -> nn.Module:
    """Ties each group of ``shared`` (as :func:`find_shared_parameters` gives them) again: every name of a group
    is set to the parameter of its first name. Returns ``module``."""
    for group in shared:
        if not group:
            continue
        first = module.get_parameter(group[0])
        for name in group[1:]:
            owner, _, attribute = name.rpartition(".")
            setattr(module.get_submodule(owner), attribute, first)
    return module
