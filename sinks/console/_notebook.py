"""The console dashboard in a Jupyter notebook: one output, updated in place.

rich's ``Live`` does not serve here. In a notebook it draws into an ipywidgets ``Output`` (and
warns, drawing nothing, without ipywidgets); its ``stop()`` skips the last refresh when the
console is Jupyter's, so the widget keeps whatever frame its refresh thread drew last (a step
well before the end), and it then flushes the console's empty buffer as an output of its own,
an empty ``<pre></pre>``. A widget's content is also not part of the notebook's saved outputs.

IPython's own mechanism is what notebooks keep: ``display(..., display_id=True)`` makes one
output and ``update`` replaces its content wherever it is shown, and the saved notebook holds
the last content. So each frame is rendered to text and HTML by a recording console of the
same width, a refresh thread sends it ``refresh_per_second`` times a second, and ``stop`` sends
the final frame from the caller's thread (the cell's) after the thread has ended.
"""

from __future__ import annotations

import io
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.console import Console

if TYPE_CHECKING:
    from rich.console import RenderableType

__all__ = ["NotebookDisplay"]

logger = logging.getLogger("hookbus")

#: How long ``stop`` waits for a refresh in progress (an ``update`` the kernel does not answer).
STOP_DEADLINE = 5.0

_PRE = (
    '<pre style="white-space:pre;overflow-x:auto;line-height:normal;'
    "font-family:Menlo,'DejaVu Sans Mono',consolas,'Courier New',monospace\">{code}</pre>"
)


def render_bundle(renderable: RenderableType, width: int) -> dict[str, str]:
    """``renderable`` drawn in ``width`` cells as a notebook output: ``text/plain`` and ``text/html``."""
    console = Console(
        file=io.StringIO(),
        record=True,
        width=width,
        color_system="truecolor",
        force_terminal=False,
        force_jupyter=False,
        legacy_windows=False,
    )
    console.print(renderable)
    text = console.export_text(clear=False)
    html = console.export_html(inline_styles=True, code_format=_PRE)
    return {"text/plain": text, "text/html": html}


class NotebookDisplay:
    """One notebook output showing ``get_renderable()``, redrawn in place on a thread of its own.

    Args:
        width: Cells per line (the notebook console's width).
        refresh_per_second: Frames per second while running.
        get_renderable: What to draw (called on the refresh thread: must not raise).

    Attributes:
        frames: Frames sent to the notebook so far (the first one included).
    """

    def __init__(self, width: int, refresh_per_second: float, get_renderable: Callable[[], RenderableType]) -> None:
        self.width = width
        self.refresh_per_second = refresh_per_second
        self._get_renderable = get_renderable
        self._handle: Any = None
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self.frames = 0

    def start(self) -> None:
        """Show the first frame as a new output and start redrawing it."""
        from IPython.display import display

        show: Callable[..., Any] = display  # IPython's display is untyped
        with self._lock:
            self._handle = show(render_bundle(self._get_renderable(), self.width), raw=True, display_id=True)
            self.frames += 1
        self._thread = threading.Thread(target=self._run, name="hookbus notebook dashboard", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.wait(1.0 / self.refresh_per_second):
            self.refresh()

    def refresh(self) -> None:
        """Replace the output's content with the frame as of now."""
        bundle = render_bundle(self._get_renderable(), self.width)
        with self._lock:
            if self._handle is not None:
                self._handle.update(bundle, raw=True)
                self.frames += 1

    def stop(self) -> None:
        """End the redrawing, then draw the final frame (idempotent)."""
        self._done.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(STOP_DEADLINE)
            if thread.is_alive():  # stuck in an update, holding the lock: the final frame would wait too
                logger.warning(
                    "ConsoleSink: the notebook output did not take a frame within %.0f s; "
                    "it keeps the last frame drawn",
                    STOP_DEADLINE,
                )
                self._handle = None
                return
        if self._handle is not None:
            self.refresh()
            self._handle = None
