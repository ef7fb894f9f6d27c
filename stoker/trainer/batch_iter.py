"""Steps of the ``dataloader_iter`` flavour: ``training_step(self, dataloader_iter)`` (likewise ``validation_step``,
``test_step``, ``predict_step``) gets an iterator instead of a batch and pulls as many batches as it needs;
``next(dataloader_iter)`` gives ``(batch, batch_idx, dataloader_idx)``.

Owns: the iterator handed to such a step (:class:`StepIterator`), the evaluation loop over it, putting a loader
whose epoch a step ended early back at the start of its next epoch, and the combinations refused. Does not own
telling the flavour from a signature (``step_args.py``) or the training batch loop (``loops.py``).

Rules (Lightning's, with the differences noted):

* The loop calls the step while batches remain. The loaders know their last batch one batch ahead, so the
  iterator knows it is exhausted as soon as that batch is pulled, with or without a length (Lightning knows it
  only for a loader with a length), and the step is not called again. A step that pulls past the end gets
  ``StopIteration``; a ``StopIteration`` out of the step ends the epoch (the loader's next epoch starts afresh).
* The batch hooks get the batch, ``batch_idx`` (and ``dataloader_idx`` with several loaders) last pulled: the
  start hooks before the step (at an epoch's start: None and the index of the batch to come), the end hooks after.
* Batches come as the loader gives them (a prepared loader's already on the device): the module's transfer hooks
  (``on_before_batch_transfer`` ...) are not called, as in Lightning.
* ``limit_*_batches`` limits the batches pulled; the train loader's saved position counts the batches pulled, so
  a checkpoint resumes at the first batch no step pulled.
* Refused, because the result would be silently wrong: gradient accumulation over several steps (a window's
  length is counted in batches, and a step may pull any number), an optimizer that evaluates the loss again
  inside its step (LBFGS: each evaluation would pull new batches), a ``BasePredictionWriter`` (it records each
  batch's sample indices, which the step's pulls do not tell), and, in training, ``self.log`` of a mean over the
  epoch without ``batch_size`` (Lightning refuses every ``self.log`` there without one; stoker only where the
  size weighs the mean).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from .iterables import CombinedLoader, IterableLoader

if TYPE_CHECKING:
    from .auto_step import AutomaticStep
    from .parts import TrainerParts

Triple = tuple[Any, int, int]


class StepIterator(Iterator[Triple]):
    """What a ``dataloader_iter`` step gets: ``next()`` gives ``(batch, batch_idx, dataloader_idx)``.

    Attributes:
        batch, batch_idx, dataloader_idx: Of the batch last pulled (before any: None, the index to come, 0).
        pulled: Batches pulled so far.
        done: No batch is left (the last one was pulled, or a pull found none).
    """

    def __init__(self, triples: Iterator[Triple], last_pulled: Callable[[], bool], first_idx: int = 0) -> None:
        self._triples = triples
        self._last_pulled = last_pulled  # True when the batch just pulled was the last (the loaders look ahead)
        self.batch: Any = None
        self.batch_idx, self.dataloader_idx = first_idx, 0
        self.pulled = 0
        self.done = False

    def __iter__(self) -> StepIterator:
        return self

    def __next__(self) -> Triple:
        if self.done:
            raise StopIteration
        try:
            triple = next(self._triples)
        except StopIteration:
            self.done = True
            raise
        self.batch, self.batch_idx, self.dataloader_idx = triple
        self.pulled += 1
        self.done = self._last_pulled()
        return triple

    def hook_args(self, several: bool) -> tuple[Any, ...]:
        """The batch hooks' arguments: the batch last pulled, its index, and its loader's index with several."""
        return (self.batch, self.batch_idx, self.dataloader_idx) if several else (self.batch, self.batch_idx)

    @staticmethod
    def unknown_batch_size() -> ValueError:
        """The error of ``self.log`` weighing an epoch mean by a batch size that only the step knows."""
        return ValueError("self.log(...) in a training_step(self, dataloader_iter) needs batch_size=N for a value "
                          "averaged over the epoch (on_epoch=True, reduce_fx='mean'): the step pulls its own "
                          "batches, so the Trainer cannot tell how many samples the value stands for. Pass "
                          "self.log(name, value, batch_size=N).")

    def close(self) -> None:
        """Leaves the loaders: one left before its last batch keeps its position until :func:`restart_unfinished`."""
        close = getattr(self._triples, "close", None)
        if close is not None:
            close()


def train_iterator(loader: Any, start: int) -> StepIterator:
    """The iterator over the train loader's epoch, from batch ``start`` (the loader's position)."""
    def triples() -> Iterator[Triple]:
        with contextlib.closing(iter(loader)) as batches:
            for batch_idx, batch in enumerate(batches, start):
                yield batch, batch_idx, 0

    return StepIterator(triples(), lambda: bool(loader.end_of_dataloader), start)


def empty_epoch_error(epoch: int) -> ValueError:
    """A train loader that yielded no batches in ``epoch`` (``fit`` needs at least one per epoch)."""
    return ValueError(f"The train loader yielded no batches in epoch {epoch}: Trainer.fit needs at least one. Check "
                      "the dataset (and drop_last with a batch size larger than it) or limit_train_batches.")


def restart_unfinished(loader: Any) -> None:
    """Puts each prepared loader in ``loader`` (itself, or those a combination reads) that was left before its last
    batch at the start of its next epoch: a ``StopIteration`` out of a step ended that epoch (Lightning drops the
    rest too), so a resumed run must not continue it. A loader without a position starts again anyway."""
    source = loader.source if isinstance(loader, IterableLoader) else None
    leaves = source.flattened if isinstance(source, CombinedLoader) else [loader]
    for leaf in leaves:  # a prepared loader (an IterableLoader has no position: it starts again anyway)
        if callable(getattr(leaf, "start_next_epoch", None)):
            leaf.start_next_epoch()


def check_training(trainer: TrainerParts, auto: AutomaticStep | None) -> None:
    """Raises ``ValueError`` for what a ``training_step(self, dataloader_iter)`` cannot do (module docstring)."""
    name = type(trainer.module).__name__
    steps = trainer.accelerator.gradient_accumulation_steps
    if steps > 1:
        raise ValueError(f"{name}.training_step takes `dataloader_iter`, so a step may pull any number of batches "
                         f"and an accumulation window of {steps} batches has no defined end. Remove the "
                         "gradient accumulation (Trainer(accumulate=...) / accumulate_grad_batches, or the "
                         "GradientAccumulationScheduler) and pull that many batches in each step instead.")
    if auto is not None and auto.closure_optimizers:
        raise ValueError(f"{type(auto.closure_optimizers[0]).__name__} evaluates the loss again inside its step, "
                         f"which would call {name}.training_step again and pull new batches from `dataloader_iter`. "
                         "Use another optimizer, or take (batch, batch_idx) in training_step.")


def check_predict(trainer: TrainerParts) -> None:
    """Raises ``ValueError`` when a ``BasePredictionWriter`` would need the batch indices of the step's pulls."""
    from ..callbacks.prediction_writer import BasePredictionWriter  # loaded lazily, as stoker.callbacks does

    writer = next((c for c in trainer.callbacks if isinstance(c, BasePredictionWriter)), None)
    if writer is not None:
        raise ValueError(f"{type(writer).__name__} writes each batch with its sample indices, which a "
                         f"{type(trainer.module).__name__}.predict_step(self, dataloader_iter) does not tell. Take "
                         "(batch, batch_idx) in predict_step, or remove the writer and save the predictions "
                         "Trainer.predict returns.")


def run_eval_steps(loaders: list[Any], step: Callable[[StepIterator], Any], start: Callable[..., Any],
                   end: Callable[..., Any], on_pull: Callable[[int, Any], None]) -> list[list[Any]]:
    """An evaluation's batches for a ``dataloader_iter`` step: ``loaders`` read one after the other through one
    iterator, ``start(*hook_args)`` / ``step(iterator)`` / ``end(output, *hook_args)`` while batches remain, and
    ``on_pull(dataloader_idx, batch)`` at each pull. Returns each loader's step outputs (by the loader of the batch
    last pulled)."""
    several = len(loaders) > 1
    last = max((i for i, loader in enumerate(loaders) if getattr(loader, "max_batches", None) != 0), default=-1)
    current = [0]

    def triples() -> Iterator[Triple]:
        for i, loader in enumerate(loaders):
            current[0] = i
            with contextlib.closing(iter(loader)) as batches:
                for batch_idx, batch in enumerate(batches):
                    on_pull(i, batch)
                    yield batch, batch_idx, i

    source = StepIterator(triples(), lambda: current[0] == last and bool(loaders[last].end_of_dataloader))
    outputs: list[list[Any]] = [[] for _ in loaders]
    try:
        while not source.done:
            start(*source.hook_args(several))
            try:
                output = step(source)
            except StopIteration:
                break
            end(output, *source.hook_args(several))
            outputs[source.dataloader_idx].append(output)
    finally:
        source.close()
        for loader in loaders:
            restart_unfinished(loader)
    return outputs
