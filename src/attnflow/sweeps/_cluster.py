"""Where a sweep's tasks run: a Dask client given, at a scheduler address, or a LocalCluster of our
own (`client_for`), and that cluster closed so that its workers exit cleanly (`close_cluster`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .point import cpus

if TYPE_CHECKING:
    from distributed import Client, LocalCluster

__all__ = ["WORKER_EXIT_S", "client_for", "close_cluster"]

WORKER_EXIT_S = 60.0  # time a worker of our LocalCluster gets to exit at the end of a sweep


def client_for(
    client: Client | str | None, workers: int
) -> tuple[Client, LocalCluster | None, int | None, bool]:
    """(client, cluster we own or None, torch threads per task on a local cluster, client is ours)."""
    from distributed import Client, LocalCluster

    if client is None:
        workers = int(workers)
        if workers < 1:
            raise ValueError(f"workers must be a positive integer, got {workers}")
        cluster = LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0"
        )
        return Client(cluster), cluster, max(1, cpus() // workers), True
    if isinstance(client, str):
        return Client(client), None, None, True
    if not isinstance(client, Client):
        raise TypeError(f"client must be a distributed.Client, a scheduler address or None, got {client!r}")
    return client, None, None, False


def close_cluster(cluster: LocalCluster, graceful: bool = True) -> None:
    """Close a LocalCluster we started. graceful: first its workers, each given WORKER_EXIT_S to
    exit; Dask's own close gives them 4 s, then kills them with a "Worker process still alive"
    warning, and a worker process that has loaded torch takes seconds to exit on a busy machine.
    After an interruption the cluster is closed at once (a running task is not waited for)."""
    import asyncio

    async def close_workers() -> None:
        await asyncio.gather(*(w.close(timeout=WORKER_EXIT_S) for w in list(cluster.workers.values())))

    try:
        if graceful:
            cluster.sync(close_workers)
    finally:
        cluster.close()
