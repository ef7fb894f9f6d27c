"""Which functions of Accelerate's test scripts run, with which arguments, in 1 and/or 2 processes.

The process counts follow each script's own ``main()``: a function that ``main()`` calls only when
``distributed_type`` is ``NO`` runs in one process, one it calls for multi-process types runs in two. Functions
that ``main()`` keeps for GPUs but that run on CPU too are included for two processes. The functions a
deliberate difference makes fail are listed in :data:`DIFFERENCES` (and in the README), with the reason.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Case:
    script: str
    function: str
    args: tuple[Any, ...] = ()
    processes: tuple[int, ...] = (1, 2)
    needs: str | None = None  # "accelerator": called with Accelerator(); "two": 2-process Accelerator; "state"

    @property
    def id(self) -> str:
        suffix = f"[{','.join(map(str, self.args))}]" if self.args else ""
        return f"{self.script}::{self.function}{suffix}"


_FLAGS = list(itertools.product((True, False), repeat=3))

CASES: list[Case] = [
    # test_sync.py
    Case("test_sync", "test_dataloader_break"),
    Case("test_sync", "test_noop_sync", needs="accelerator", processes=(1,)),
    Case("test_sync", "test_distributed_sync", needs="accelerator", processes=(2,)),
    Case("test_sync", "test_distributed_sync_multiple_fwd", needs="accelerator", processes=(2,)),
    Case("test_sync", "test_gradient_accumulation_with_opt_and_scheduler"),
    *[Case("test_sync", "test_gradient_accumulation", flags, processes=(2,)) for flags in _FLAGS],
    *[Case("test_sync", "test_gradient_accumulation_with_opt_and_scheduler", flags, processes=(2,))
      for flags in _FLAGS if any(flags)],
    # test_script.py
    Case("test_script", "init_state_check"),
    Case("test_script", "process_execution_check"),
    Case("test_script", "test_split_between_processes_list"),
    Case("test_script", "test_split_between_processes_tuple"),
    Case("test_script", "test_split_between_processes_nested_dict"),
    Case("test_script", "test_split_between_processes_tensor"),
    Case("test_script", "test_split_between_processes_evenly"),
    Case("test_script", "rng_sync_check"),
    Case("test_script", "dl_preparation_check"),
    Case("test_script", "central_dl_preparation_check"),
    Case("test_script", "custom_sampler_check"),
    Case("test_script", "check_seedable_sampler"),
    Case("test_script", "check_seedable_sampler_with_data_seed"),
    Case("test_script", "check_seedable_sampler_in_batch_sampler_shard", processes=(2,)),
    Case("test_script", "training_check", (False,)),
    Case("test_script", "training_check", (True,)),
    Case("test_script", "test_trigger"),
    Case("test_script", "test_reinstantiated_state"),
    # test_distributed_data_loop.py (written for exactly two processes)
    Case("test_distributed_data_loop", "test_skip_first_batches_preserves_metric_samples", needs="two",
         processes=(2,)),
    *[Case("test_distributed_data_loop", name, processes=(2,)) for name in (
        "test_default_ensures_even_batch_sizes", "test_can_disable_even_batches", "test_can_join_uneven_inputs",
        "test_join_can_override_even_batches", "test_join_can_override_for_mixed_type_dataloaders",
        "test_join_raises_warning_for_iterable_when_overriding_even_batches", "test_pickle_accelerator")],
    Case("test_distributed_data_loop", "test_join_raises_warning_for_non_ddp_distributed", needs="two-as-fsdp",
         processes=(2,)),
    *[Case("test_distributed_data_loop", "test_data_loader", (kind,), needs="two", processes=(2,))
      for kind in ("shuffle=False", "shuffle=True", "batch_sampler", "sampler=BatchSampler")],
    Case("test_distributed_data_loop", "test_stateful_dataloader", needs="two", processes=(2,)),
    Case("test_distributed_data_loop", "test_stateful_dataloader_save_state", needs="two", processes=(2,)),
    # test_ops.py
    *[Case("test_ops", name, needs="state") for name in (
        "test_gather", "test_gather_object", "test_gather_non_contiguous", "test_broadcast",
        "test_pad_across_processes", "test_reduce_sum", "test_reduce_mean", "test_reduce_max", "test_op_checker")],
]

@dataclass(frozen=True)
class Difference:
    """A case that fails because stoker deliberately behaves differently: ``reason`` (the README lists it) and
    ``error``, a regular expression the failure must match (so it fails where the difference predicts, and only
    there)."""

    reason: str
    error: str


_LAST_WINDOW = ("the last, short accumulation window of an epoch is divided by its own length, not by "
                "gradient_accumulation_steps (the scripts' reference divides by 2)")


def difference(case: Case, processes: int) -> Difference | None:
    """The deliberate difference ``case`` runs into in ``processes`` processes, or None when it must pass."""
    if case.function.startswith("test_gradient_accumulation") and processes == 2 and case.args:
        # 80 samples in batches of 16: 5 batches split in halves (split_batches), or 3 per process; the failure is
        # at the last batch, which closes a window of one micro-batch.
        last = 4 if case.args[0] else 2
        return Difference(_LAST_WINDOW, rf"Gradients not in sync when they should be at iteration {last}\b")
    if case.id == "test_sync::test_gradient_accumulation_with_opt_and_scheduler" and processes == 2:
        return Difference(_LAST_WINDOW, r"Gradients not in sync when they should be at iteration 2\b")
    if case.id == "test_script::training_check[False]":
        return Difference("a prepared loader shuffles from its own seed (set_seed before prepare, or "
                          "DataLoaderConfiguration(data_seed=...)), not from a generator= passed to the DataLoader",
                          r"Did not obtain the same model on CPU or distributed training")
    if case.id == "test_script::test_reinstantiated_state":
        return Difference("there is no process-wide AcceleratorState: each Accelerator owns its state, so "
                          "AcceleratorState._reset_state() breaks nothing", r"DID NOT RAISE")
    if case.id == "test_ops::test_op_checker" and processes == 2:
        return Difference("collectives do not check that every process passed the same shapes (Accelerate's debug "
                          "mode, state.debug / ACCELERATE_DEBUG_MODE)", r"DistributedOperationException.*ran without issue")
    return None


def call(module: Any, case: Case) -> None:
    """Calls ``case``'s function of ``module`` (a swapped script module) with the arguments it needs."""
    function = getattr(module, case.function)
    if case.needs == "accelerator":
        function(module.Accelerator())
    elif case.needs == "state":
        function(module.PartialState())
    elif case.needs in ("two", "two-as-fsdp"):
        accelerator = module.create_accelerator()
        if case.needs == "two":
            args = case.args and (_loader(module, case.args[0]),)
            function(*args, accelerator) if args else function(accelerator)
            return
        original = accelerator.state.distributed_type  # as the script's main() does
        accelerator.state.distributed_type = module.DistributedType.FSDP
        try:
            function(accelerator)
        finally:
            accelerator.state.distributed_type = original
    else:
        function(*case.args)


def _loader(module: Any, kind: str) -> Any:
    """The loaders ``test_distributed_data_loop.main()`` builds for ``test_data_loader``."""
    from torch.utils.data import BatchSampler, DataLoader, RandomSampler, default_collate

    dataset, size, workers = module.DummyDataset(), module.BATCH_SIZE, module.NUM_WORKERS
    if kind.startswith("shuffle="):
        return DataLoader(dataset, shuffle=kind.endswith("True"), batch_size=size, num_workers=workers)
    sampler = BatchSampler(RandomSampler(dataset), batch_size=size, drop_last=False)
    if kind == "batch_sampler":
        return DataLoader(dataset, batch_sampler=sampler, num_workers=workers)
    return DataLoader(dataset, sampler=sampler, batch_size=None, collate_fn=default_collate, num_workers=workers)
