"""A second Ray node on 127.0.0.1 that joins the cluster whose GCS is at ADDRESS, until killed.

    python -m tests.integration.served.second_node ADDRESS NUM_CPUS PORT PORT PORT PORT

`ray start --address` cannot add a node on loopback: it refuses to unless Ray's multi-node mode
is on, and in that mode Ray rewrites 127.0.0.1 in the address to the machine's outward IP. So the
node is started as `ray.cluster_utils.Cluster.add_node` starts one, at the address as given, with
the caller's environment (Ray's token settings included). The four ports (metrics export, metrics
agent, dashboard agent, runtime-env agent) are chosen by the caller; the rest are picked by the OS.

If one of the node's processes dies (its raylet, an agent), this process prints which, with the
tail of that node's logs, and exits 1: the caller sees a dead node instead of one that never joins.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path


def main(address: str, num_cpus: str, *ports: str) -> None:
    import ray._private.node
    import ray._private.parameter

    metrics_export, metrics_agent, dashboard_agent, runtime_env_agent = (int(p) for p in ports)
    params = ray._private.parameter.RayParams(
        gcs_address=address,
        node_ip_address="127.0.0.1",
        num_cpus=int(num_cpus),
        num_gpus=0,
        object_store_memory=200 * 2**20,
        min_worker_port=0,
        max_worker_port=0,
        node_manager_port=0,
        include_log_monitor=False,  # one per host: the head's
        metrics_export_port=metrics_export,
        metrics_agent_port=metrics_agent,
        dashboard_agent_listen_port=dashboard_agent,
        runtime_env_agent_port=runtime_env_agent,
    )
    node = ray._private.node.Node(params, head=False, shutdown_at_exit=False, spawn_reaper=False)
    print(f"node started for {address}, logs in {node.get_logs_dir_path()}", flush=True)
    while not (dead := node.dead_processes()):  # the node runs until the caller kills this process group
        time.sleep(0.5)
    print(f"node processes died: {[kind for kind, _ in dead]}", flush=True)
    for log in sorted(Path(node.get_logs_dir_path()).glob("*")):
        if log.name.startswith(("raylet", "dashboard_agent", "runtime_env_agent")) and log.is_file():
            print(f"--- {log.name} (last 1500 characters)\n{log.read_text(errors='replace')[-1500:]}", flush=True)
    sys.exit(1)


if __name__ == "__main__":
    main(*sys.argv[1:])
