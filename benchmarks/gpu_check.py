"""One prepared GPU check of stoker: parity, host syncs, step time, one-process DDP/FSDP2, peak memory.

    python benchmarks/gpu_check.py --out gpu_check.json          # on a GPU machine: under 5 minutes
    python benchmarks/gpu_check.py --tiny --out /tmp/check.json  # CPU smoke (what the test runs): seconds

Sections (each row in the table is one measurement; the rows are in ``gpu_check_rows.py``):
  a. parity   fp32/bf16/fp16: Accelerator and Trainer against a hand-written AMP loop on the same seed and batches
              (final loss, max parameter difference, fp16 skipped steps).
  b. sync     host-device syncs per optimizer step of the Accelerator loop and of the bare Trainer, counted with
              ``torch.cuda.set_sync_debug_mode`` on CUDA (on CPU with the test suite's SyncCounter).
  c. speed    step time of stoker / raw loop on a launch-bound MLP and a ~100M-parameter bf16 transformer stack,
              eager and ``torch.compile`` (compile rows: CUDA only); ``aa_ratio`` times a second raw loop against the
              first, the noise of the row.
  d. dist     DDP and FSDP2 in one process (NCCL on CUDA, gloo on CPU): train, save_state, load_state elsewhere,
              compare weights.
  e. memory   peak CUDA memory of stoker / raw loop on the transformer stack (CUDA only).

Every row runs in its own try/except: an error is recorded in its row and the next row runs. Rows that would
start after ``--budget`` seconds are skipped (recorded as such), and the JSON file is rewritten after every row,
so a run that is killed keeps what it measured.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
for path in (REPO, REPO / "benchmarks"):  # stoker, the test helpers (CPU sync counter) and the rows
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import torch  # noqa: E402

import gpu_check_rows as rows  # noqa: E402

# (name, section, estimated seconds on one GPU, row function)
Row = tuple[str, str, float, Callable[[rows.Setup], dict[str, Any]]]


def all_rows() -> list[Row]:
    out: list[Row] = []
    for precision in ("fp32", "bf16", "fp16"):
        out.append((f"parity-{precision}", "a", 10, partial(rows.parity, precision=precision)))
    for runner in ("accelerator", "trainer"):
        for precision in ("fp32", "bf16", "fp16"):
            out.append((f"sync-{runner}-{precision}", "b", 5, partial(rows.sync_check, runner=runner,
                                                                       precision=precision)))
        out.append((f"sync-{runner}-host-input-fp32", "b", 5, partial(rows.sync_check, runner=runner,
                                                                       precision="fp32", host_input=True)))
    for precision in ("bf16", "fp16"):
        out.append((f"sync-trainer-logged-{precision}", "b", 10, partial(rows.sync_check_logged, precision=precision)))
    for kind in ("mlp", "transformer"):
        for compiled in (False, True):
            name = f"speed-{kind}-{'compile' if compiled else 'eager'}"
            estimate = {"mlp": 15, "transformer": 20}[kind] + (60 if compiled else 0)
            out.append((name, "c", estimate, partial(rows.step_time, kind=kind, compile=compiled)))
    out.append(("dist-ddp-1proc", "d", 15, partial(rows.one_process_strategy, kind="ddp")))
    out.append(("dist-fsdp2-1proc", "d", 15, partial(rows.one_process_strategy, kind="fsdp")))
    out.append(("memory-transformer-bf16", "e", 15, rows.peak_memory))
    return out


class RowTimeout(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise RowTimeout("row exceeded its time limit")


def run_row(row: Row, setup: rows.Setup, limit: float) -> dict[str, Any]:
    """Runs one row; never raises (errors, skips and time-outs are recorded in the result)."""
    name, section, _, fn = row
    result: dict[str, Any] = {"name": name, "section": section}
    start = time.perf_counter()
    use_alarm = hasattr(signal, "SIGALRM") and limit > 0 and threading.current_thread() is threading.main_thread()
    if use_alarm:  # an outer timer (e.g. pytest-timeout's) is put back afterwards with what it had left
        previous = signal.signal(signal.SIGALRM, _alarm)
        outer_left = signal.getitimer(signal.ITIMER_REAL)[0]
        signal.setitimer(signal.ITIMER_REAL, min(limit, outer_left) if outer_left else limit)
    try:
        result.update(fn(setup))
        result["status"] = "ok"
    except rows.Skip as skip:
        result.update(status="skipped", reason=str(skip))
    except (Exception, RowTimeout) as error:  # one failure must not lose the other rows
        result.update(status="error", error=f"{type(error).__name__}: {error}",
                      traceback=traceback.format_exc(limit=-6))
    finally:
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
            if outer_left:
                signal.setitimer(signal.ITIMER_REAL, max(outer_left - (time.perf_counter() - start), 0.001))
        if setup.cuda:
            try:
                torch.cuda.set_sync_debug_mode("default")
            except Exception:
                pass
    result["seconds"] = round(time.perf_counter() - start, 2)
    return result


def environment(setup: rows.Setup, args: argparse.Namespace) -> dict[str, Any]:
    info: dict[str, Any] = {"torch": torch.__version__, "python": platform.python_version(),
                            "device": str(setup.device), "tiny": args.tiny, "budget_s": args.budget,
                            "threads": torch.get_num_threads(), "cpu_count": os.cpu_count()}
    if setup.cuda:
        props = torch.cuda.get_device_properties(setup.device)
        info.update(gpu=props.name, gpu_memory_GiB=round(props.total_memory / 2**30, 1), cuda=torch.version.cuda,
                    nccl=str(torch.cuda.nccl.version()) if hasattr(torch.cuda, "nccl") else None)
    return info


_SUMMARY_KEYS = ("verdict", "ratio", "aa_ratio", "bound", "syncs_per_step", "syncs_off_log_steps",
                 "syncs_per_log_step", "syncs_last_step_and_epoch_end", "accelerator_max_diff", "trainer_max_diff",
                 "max_diff_after_load", "raw_ms", "stoker_ms", "raw_loss", "accelerator_skipped", "raw_MiB",
                 "stoker_MiB", "backend")


def format_table(results: list[dict[str, Any]]) -> str:
    lines = [f"{'row':<33} {'status':<8} {'s':>6}  result"]
    for r in results:
        if r["status"] == "ok":
            detail = ", ".join(f"{k}={_fmt(r[k])}" for k in _SUMMARY_KEYS if k in r)
            if r.get("verdict") not in (None, "pass") and r.get("sites"):
                detail += f"; first: {r['sites'][0]}"
        else:
            detail = r.get("reason") or r.get("error", "")
        lines.append(f"{r['name']:<33} {r['status']:<8} {r['seconds']:>6.1f}  {detail}")
    return "\n".join(lines)


def _fmt(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="gpu_check.json", help="where the JSON table is written")
    parser.add_argument("--tiny", action="store_true", help="smallest sizes (the CPU smoke test)")
    parser.add_argument("--cpu", action="store_true", help="run on the CPU even when CUDA is available")
    parser.add_argument("--budget", type=float, default=270.0, help="seconds; later rows are skipped past it")
    parser.add_argument("--row-limit", type=float, default=120.0, help="seconds one row may take")
    parser.add_argument("--only", default="", help="comma-separated row-name prefixes to run (default: all)")
    args = parser.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() and not args.cpu else "cpu")
    setup = rows.Setup(device=device, tiny=args.tiny)
    selected = [r for r in all_rows() if not args.only or any(r[0].startswith(p) for p in args.only.split(","))]
    report: dict[str, Any] = {"environment": environment(setup, args), "rows": []}
    out = Path(args.out)
    start = time.perf_counter()
    for row in selected:
        elapsed = time.perf_counter() - start
        estimate = 0.0 if args.tiny else row[2]
        if elapsed + estimate > args.budget:
            reason = f"time budget: {elapsed:.0f} s used of {args.budget:.0f} s, row needs ~{estimate:.0f} s"
            result = {"name": row[0], "section": row[1], "status": "skipped", "seconds": 0.0, "reason": reason}
        else:
            limit = min(args.row_limit, max(args.budget - elapsed, 1.0))
            result = run_row(row, setup, limit)
        report["rows"].append(result)
        report["total_s"] = round(time.perf_counter() - start, 2)
        out.write_text(json.dumps(report, indent=1, default=str))
        print(f"  {row[0]}: {result['status']} ({result['seconds']:.1f} s)", file=sys.stderr, flush=True)
    print(format_table(report["rows"]))
    print(f"total {report['total_s']:.1f} s on {device}; JSON: {out}")
    return report


if __name__ == "__main__":
    main()
