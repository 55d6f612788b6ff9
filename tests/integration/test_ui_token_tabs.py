"""The UI's access token in a real browser (issue 37, point 10): asked once, not once per tab, and
never kept past the tabs that hold it.

A tab keeps the token in its sessionStorage (ui/static/common.js); a new tab asks the open tabs of
the UI for it over a BroadcastChannel and asks the user only when none has one the server took. Nothing
goes to localStorage, so once every tab is closed the next one asks again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from elastune.ui import UISettings, create_app

pytestmark = pytest.mark.integration

TOKEN = "tab-test-token-0123456789abcdef"
STORED = "() => [sessionStorage.getItem('elastune-ui-token'), JSON.stringify({...localStorage})]"


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory, free_port: Callable[[], int], serve_ui: Any) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("ui")
    (folder / "specs").mkdir()
    port = free_port()
    settings = UISettings(
        port=port,
        token=TOKEN,
        tracking_uri=f"sqlite:///{folder / 'mlflow.db'}",
        spec_dir=folder / "specs",
        ray_address=f"http://127.0.0.1:{free_port()}",  # no job server: the sweeps page does not need one
    )
    with serve_ui(create_app(settings), port) as url:
        yield url


def _open(context: Any, base: str) -> Any:
    page = context.new_page()
    page.set_default_timeout(20_000)
    page.goto(f"{base}/sweeps")
    return page


def _log_in(page: Any, token: str) -> None:
    page.wait_for_selector("#token-dialog[open]")
    page.fill("#token-input", token)
    page.click("#token-form button[type=submit]")


def _asked(page: Any) -> bool:
    return bool(page.evaluate("() => document.getElementById('token-dialog').open"))


def test_a_new_tab_takes_the_token_of_an_open_one_and_nothing_outlives_the_tabs(browser: Any, base: str) -> None:
    context = browser.new_context()  # one browser profile: its tabs share a BroadcastChannel
    try:
        first = _open(context, base)
        _log_in(first, "not-the-token-0123456789")  # refused: asked again, and never shared
        first.wait_for_selector("#token-error:not([hidden])")
        assert _asked(first)
        waiting = _open(context, base)  # no tab holds a token the server took: this one asks as well
        waiting.wait_for_selector("#token-dialog[open]")
        waiting.close()
        _log_in(first, TOKEN)
        first.wait_for_function("() => !document.getElementById('token-dialog').open")
        assert first.evaluate("() => Elastune.api.get('/api/sweeps')") == []  # the server takes it

        second = _open(context, base)
        second.wait_for_function(f"() => sessionStorage.getItem('elastune-ui-token') === {TOKEN!r}")
        assert second.evaluate("() => Elastune.api.get('/api/sweeps')") == []
        assert not _asked(second)
        for page in (first, second):
            assert page.evaluate(STORED) == [TOKEN, "{}"]  # per tab, nothing in localStorage

        first.close()
        second.close()
        third = _open(context, base)  # no tab left holds it: asked again
        third.wait_for_selector("#token-dialog[open]")
        assert third.evaluate(STORED) == [None, "{}"]
    finally:
        context.close()


def test_another_browser_profile_is_asked(browser: Any, base: str) -> None:
    """A BroadcastChannel reaches only the pages of one profile: another one's tab asks its user."""
    holder, other = browser.new_context(), browser.new_context()
    try:
        page = _open(holder, base)
        _log_in(page, TOKEN)
        page.wait_for_function("() => !document.getElementById('token-dialog').open")
        assert page.evaluate("() => Elastune.api.get('/api/sweeps')") == []
        _open(other, base).wait_for_selector("#token-dialog[open]")
    finally:
        holder.close()
        other.close()
