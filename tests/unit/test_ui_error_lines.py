"""The web UI says Ray's connection errors whole: where Ray found several clusters on the machine,
its message used to be cut in the middle of its fix; now the UI names the option that picks one."""

from __future__ import annotations

from ui.memory import memory_view
from ui.ray_jobs import _first_line

SEVERAL = (
    "Found multiple active Ray instances: {'127.0.0.1:6379', '127.0.0.1:44785'}. Please specify the one to "
    "connect to by setting `--address` flag or `RAY_ADDRESS` environment variable to one of them. "
) + "x" * 400


def test_the_job_servers_error_names_the_uis_option_for_several_clusters() -> None:
    line = _first_line(ConnectionError(SEVERAL))
    assert "Ray found 2 clusters on this machine (127.0.0.1:44785, 127.0.0.1:6379)" in line
    assert line.endswith("or set RAY_ADDRESS=HOST:PORT") and "--cluster-address HOST:PORT" in line


def test_a_long_error_is_one_line_and_not_cut_at_300_characters() -> None:
    text = "failed to connect:\n" + "word " * 100 + "fix: start the cluster"
    line = _first_line(RuntimeError(text))
    assert "\n" not in line and line.endswith("fix: start the cluster")


def test_the_memory_page_says_it_whole_too() -> None:
    def reader(_: float) -> None:
        raise ConnectionError(SEVERAL)

    reason = memory_view(reader, 60.0)["reason"]
    assert reason.startswith("No Ray cluster to ask for device memory: Ray found 2 clusters")
    assert "--cluster-address HOST:PORT" in reason
