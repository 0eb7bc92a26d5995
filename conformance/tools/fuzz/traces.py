"""Writing a finding's trace the moment it is found, once per kind of failure.

Every worker of a campaign replays what the others found, so the same failure is seen many
times. Its trace file is named by the job and the kind of failure
(:func:`~..lockstep.signature`), ``TARGET-MACHINE-LEVEL-fuzz-DIGEST.itf.json`` (the
manager's name joins the target's for the request machine on a manager); the first worker
to put that file in place wins, and the others leave it alone. A later campaign writing to
the same directory leaves it alone too: delete the file to have it written again.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from ...machines.pool.runner import Failure
from ...machines.pool.signature import signature
from ...trace.files import slug, write_pytest, write_trace
from ...trace.model import Trace, TraceMeta
from ...trace.record import record
from ...trace.save import kvpool_version
from .plan import CampaignPlan, JobSpec


def trace_path(plan: CampaignPlan, job: JobSpec, message: str) -> Path:
    """Where the trace of a failure of this kind in this job is written."""
    digest = hashlib.sha256(signature(message).encode()).hexdigest()[:10]
    checked = plan.target
    if job.machine == "requests" and job.level == "manager":
        checked += f" manager {plan.manager}"
    name = f"{slug(checked)}-{job.machine}-{job.level}-fuzz-{digest}.itf.json"
    return Path(plan.trace_dir) / name


def save_finding(
    plan: CampaignPlan,
    job: JobSpec,
    failure: Failure,
    seed: int | None,
    target_version: str | None,
) -> tuple[Path, bool]:
    """Write the trace of ``failure`` (and its pytest file) unless its kind was written
    already; the trace's path and whether this call wrote it. The trace file appears whole
    or not at all (a worker killed while writing leaves no half-written trace). Raises what
    recording the trace (a replay on the target) raised."""
    path = trace_path(plan, job, failure.message)
    if path.exists():
        return path, False
    meta = TraceMeta(
        target=plan.target,
        profile=plan.profile,
        machine=job.machine,
        level=job.level,
        config=failure.config,
        seed=seed,
        manager=plan.manager if job.machine == "requests" else None,
        target_version=target_version,
        kvpool_version=kvpool_version(),
        message=failure.message,
    )
    recorded = record(Trace(meta, failure.trace))
    path.parent.mkdir(parents=True, exist_ok=True)
    draft = path.with_name(f".{path.name}.{os.getpid()}")
    write_trace(recorded, draft)
    try:
        os.link(draft, path)  # all at once, and only if no other worker got there first
    except FileExistsError:
        return path, False
    finally:
        draft.unlink(missing_ok=True)
    write_pytest(path, recorded)
    return path, True
