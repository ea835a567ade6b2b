"""Where the runs of a sweep train: in this process, in a pool of local worker
processes, or as Ray tasks on a cluster. Whatever the executor, workers only train and
evaluate (``harness.execution.run.train_and_evaluate``) and ship a ``RunResult`` back; the driver
(:func:`run_sweep`) alone writes the results store.

One module per part:

    jobs          a job (one attempt at one run, as plain data) and what comes back from it
    worker        what every worker runs for a job (``run_job``), and injected faults
    interface     the ``Executor`` interface: ``submit(job)``, ``wait()``, ``close()``
    in_process    ``InProcess``: in this process, one job at a time
    local_pool    ``LocalPool``: worker processes on this machine, one per device slot
    grouped       ``Grouped``: runs side by side in this process, a thread and a CUDA stream each;
                  with ``PEZOO_ACCEL=...,stack`` runs of one shape share each step's pass
                  (``harness.training.stacked``)
    ray_executor  ``RayExecutor``: Ray tasks on a cluster (Ray imported only there)
    sizing        how many local workers on which devices, threads or processes (``local_executor``)
    driver        the driver loop (``run_sweep``): claims, retries, records

Determinism: pool workers and Ray tasks train with one torch thread
(``torch.set_num_threads(1)``), so on CPU the same seeds give bit-identical metrics on
either executor. The in-process executor keeps the process's thread count; CPU matmul
results depend on it in the last bits, so its numbers may differ from the pool's in the
last digits (each is reproducible by itself).
"""

from harness.sweeps.executors.driver import SweepEvents, SweepStopped, run_sweep
from harness.sweeps.executors.grouped import Grouped
from harness.sweeps.executors.in_process import InProcess
from harness.sweeps.executors.interface import Executor, ExecutorError
from harness.sweeps.executors.jobs import Completion, Job, NoticeReport, ProgressReport, Started, WorkerLost
from harness.sweeps.executors.local_pool import LocalPool, throttled_progress
from harness.sweeps.executors.ray_executor import RayExecutor, task_name
from harness.sweeps.executors.sizing import local_devices, local_executor
from harness.sweeps.executors.worker import FAULT_ENV, injected_faults, run_job

__all__ = [
    "FAULT_ENV",
    "Completion",
    "Executor",
    "ExecutorError",
    "Grouped",
    "InProcess",
    "Job",
    "LocalPool",
    "NoticeReport",
    "ProgressReport",
    "RayExecutor",
    "Started",
    "SweepEvents",
    "SweepStopped",
    "WorkerLost",
    "injected_faults",
    "local_devices",
    "local_executor",
    "run_job",
    "run_sweep",
    "task_name",
    "throttled_progress",
]
