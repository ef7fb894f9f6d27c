"""Worker: runs the cases of ``cases.py`` for this process count and writes ``rank{r}.json`` (case id -> error or
None) into the folder given as the first argument.

``python tests/compat/run_cases.py OUT [--impl accelerate] [--only ID ...]``; in several processes it is started
by ``tests/helpers/dist_spawn.run_workers`` (torchrun's environment). ``--impl accelerate`` runs the same
functions on Accelerate itself (nothing swapped): the baseline a difference is judged against.

All processes must stay in step through collectives, so after every case they meet at a barrier on the process
group's store (not a collective, so a rank stuck in a collective of a failed case cannot deadlock it); when the
barrier times out, the remaining cases are reported as not run.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
import traceback
import warnings
from datetime import timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from tests.compat import swap  # noqa: E402
from tests.compat.cases import CASES, call  # noqa: E402
from tests.compat.example_cases import EXAMPLES  # noqa: E402

STEP_TIMEOUT = 60.0


def _meet(store: dist.Store, key: str, world: int) -> bool:
    store.add(key, 1)
    deadline = time.monotonic() + STEP_TIMEOUT
    while store.add(key, 0) < world:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--impl", choices=("stoker", "accelerate"), default="stoker")
    parser.add_argument("--only", nargs="*")
    args = parser.parse_args()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    store = None
    if world > 1:  # a short timeout: a collective left waiting by a failed case fails instead of hanging
        # Before the group, as the README asks of scripts that create it themselves: imported while a group
        # exists, torch._dynamo keeps it (and gloo's threads) to the interpreter's finalization, where exiting
        # can abort (the cases' DDP wrappers import it).
        importlib.import_module("torch._dynamo")  # (an `import torch._dynamo` here would make `torch` local)
        dist.init_process_group("gloo", timeout=timedelta(seconds=STEP_TIMEOUT))
        store = dist.distributed_c10d._get_default_store()
    warnings.simplefilter("ignore")
    results: dict[str, str | None] = {}
    observed: dict[str, object] = {}
    cases = [(c.id, c) for c in CASES if world in c.processes]
    if args.impl == "stoker":  # the examples import stoker: there is no Accelerate run of them
        cases += [(f"example::{name}", name) for name in EXAMPLES]
    cases = [(case_id, c) for case_id, c in cases if not args.only or case_id in args.only]
    home = os.getcwd()
    out = Path(args.out)
    in_step = True
    for i, (case_id, case) in enumerate(cases):
        cwd = out / "cwd" / str(i)  # shared by the processes: some functions coordinate through files there
        cwd.mkdir(parents=True, exist_ok=True)
        os.chdir(cwd)
        try:
            if isinstance(case, str):
                observed[case_id] = EXAMPLES[case](cwd)
            elif args.impl == "stoker":
                with swap.swapped(swap.load(case.script)) as module:
                    call(module, case)
            else:
                call(swap.load(case.script), case)
            results[case_id] = None
        except BaseException as error:  # noqa: BLE001 - recorded for the test to report
            results[case_id] = "".join(traceback.format_exception(error))[-3000:]
        os.chdir(home)
        if os.environ.get("COMPAT_TRACE"):
            print(f"[rank{rank}] {time.monotonic():.1f} {case_id}: {'ok' if results[case_id] is None else 'FAILED'}",
                  file=sys.stderr, flush=True)
        if store is not None and not _meet(store, f"case{i}", world):
            for rest, _ in cases[i + 1:]:
                results[rest] = "not run: the processes fell out of step after " + case_id
            in_step = False
            break
        torch.manual_seed(0)
    (out / f"rank{rank}.json").write_text(json.dumps({"results": results, "observed": observed}, indent=1))
    if not in_step:  # another process is stuck in a collective: leave without meeting it
        sys.stdout.flush()
        os._exit(3)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
