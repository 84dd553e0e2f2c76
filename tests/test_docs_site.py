"""The documentation site, read in a real browser (issue 50): built strictly from ``mkdocs.yml``,
served on 127.0.0.1 and opened in headless Chromium, its search finds "resume" and a sink's
reference page shows the sink's signature, its arguments with their defaults.

Needs MkDocs (the ``docs`` extra) in this interpreter, or ``HOOKBUS_MKDOCS`` naming a ``mkdocs``
executable (``.ci/run`` points it at ``.venv-docs``, where it installs the extra), and
``/usr/bin/chromium`` (Debian: ``apt-get install chromium``; ``.ci/run`` installs it in the
background); skipped, saying which, where either is absent. ``HOOKBUS_DOCS_SCREENSHOTS`` naming a
folder keeps a screenshot of the home page (``home.png``) and of a reference page (``ref.png``).
"""

from __future__ import annotations

import base64
import functools
import importlib.util
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = os.environ.get("HOOKBUS_DOCS_SCREENSHOTS")


def mkdocs_command() -> list[str] | None:
    named = os.environ.get("HOOKBUS_MKDOCS")
    if named:
        return [named]
    if importlib.util.find_spec("mkdocs") is not None and importlib.util.find_spec("mkdocstrings") is not None:
        return [sys.executable, "-m", "mkdocs"]
    return None


pytestmark = [
    pytest.mark.skipif(
        mkdocs_command() is None,
        reason="needs MkDocs: pip install -e '.[docs]', or HOOKBUS_MKDOCS naming its mkdocs (.ci/run: .venv-docs)",
    ),
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason="needs headless Chromium at /usr/bin/chromium (Debian: apt-get install chromium)"
    ),
]


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The site, built strictly into a folder of its own, served on 127.0.0.1: its address."""
    command = mkdocs_command()
    assert command is not None
    folder = tmp_path_factory.mktemp("site") / "site"
    built = subprocess.run(
        # not --quiet: it hides the warnings --strict counts (MkDocs 1.6), and a broken docstring would pass
        [*command, "build", "--strict", "--site-dir", str(folder)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


class Browser:
    """Headless Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``:
    JSON messages, each ended by a NUL byte, on file descriptors 3 and 4); no package needed."""

    def __init__(self, profile: Path) -> None:
        to_chromium, self._commands = os.pipe()
        self._replies, from_chromium = os.pipe()
        arguments = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--remote-debugging-pipe",
            f"--user-data-dir={profile}",
            "about:blank",
        ]
        self._process = subprocess.Popen(
            ["bash", "-c", f'exec "$0" "$@" 3<&{to_chromium} 4>&{from_chromium}', str(CHROMIUM), *arguments],
            pass_fds=(to_chromium, from_chromium),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_chromium)
        os.close(from_chromium)
        self._buffer = b""
        self._next_id = 0
        self._session: str | None = None
        targets = self.send("Target.getTargets")["targetInfos"]
        page = next(t["targetId"] for t in targets if t["type"] == "page")
        self._session = self.send("Target.attachToTarget", targetId=page, flatten=True)["sessionId"]
        self.send("Page.enable")
        self.send("Emulation.setDeviceMetricsOverride", width=1400, height=1000, deviceScaleFactor=1, mobile=False)

    def _message(self) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            chunk = os.read(self._replies, 1 << 16)
            assert chunk, "Chromium closed its pipe"
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\0", 1)
        message: dict[str, Any] = json.loads(line)
        return message

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        """A command's result, the events that come before it passed over."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if self._session is not None:
            message["sessionId"] = self._session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._message()
            if reply.get("id") == self._next_id:
                assert "error" not in reply, (method, reply["error"])
                result: dict[str, Any] = reply["result"]
                return result

    def open(self, address: str) -> None:
        """Load ``address`` and wait for its load event."""
        self.send("Page.navigate", url=address)
        while self._message().get("method") != "Page.loadEventFired":
            pass

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page, a promise awaited."""
        result = self.send("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

    def screenshot(self, name: str) -> None:
        if SCREENSHOTS:
            folder = Path(SCREENSHOTS)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / name).write_bytes(base64.b64decode(self.send("Page.captureScreenshot", format="png")["data"]))

    def close(self) -> None:
        os.close(self._commands)  # Chromium exits when its pipe closes
        try:
            self._process.wait(timeout=30)
        finally:
            if self._process.poll() is None:
                self._process.kill()
                self._process.wait()
        os.close(self._replies)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Browser]:
    opened = Browser(tmp_path / "profile")
    try:
        yield opened
    finally:
        opened.close()


#: Resolves, once the search results list (Material's ``.md-search-result__list``) has items, to
#: their texts; the search runs in a web worker over the built search_index.json.
RESULTS = """new Promise(resolve => {
    const list = document.querySelector(".md-search-result__list");
    const done = () => list.children.length && resolve([...list.children].map(item => item.innerText));
    new MutationObserver(done).observe(list, {childList: true});
    done();
})"""


def test_the_sites_search_finds_resume(site: str, browser: Browser) -> None:
    browser.open(f"{site}/")
    assert browser.evaluate("document.title").startswith("hookbus")
    browser.screenshot("home.png")
    browser.evaluate('document.querySelector("label.md-search__icon, .md-search__input").click()')
    browser.evaluate('document.querySelector(".md-search__input").focus()')
    browser.send("Input.insertText", text="resume")  # typed, as a reader types it
    results = browser.evaluate(RESULTS)
    assert results, results
    assert any("resume" in r.lower() for r in results), results[:5]
    meta = browser.evaluate('document.querySelector(".md-search-result__meta").innerText')
    assert re.fullmatch(r"\d+ matching documents?", meta.strip()), meta


def test_a_sinks_reference_page_shows_its_signature(site: str, browser: Browser) -> None:
    browser.open(f"{site}/reference/sinks/CSVSink/")
    signature = browser.evaluate('document.querySelector(".doc-signature").innerText')
    compact = re.sub(r"\s+", "", signature).replace("'", '"')  # quotes as the formatter (or none) leaves them
    assert compact.startswith("CSVSink("), signature
    for argument in ("every_n_steps:int|None=None", "epochs:bool=False", 'separator:str=","'):
        assert argument in compact, (argument, signature)
    # the arguments' table, from the docstring, and a cross-link to the base class's page
    text = browser.evaluate("document.body.innerText")
    assert "every_n_steps" in text
    links = browser.evaluate('[...document.querySelectorAll("a")].map(a => a.href)')
    assert any(link.endswith("/reference/sink_api/#hookbus.sink_api.Sink") for link in links), links
    browser.screenshot("ref.png")
