"""``hookbus watch PATH``: the command, wiring the watcher to the console sink's rendering.

Part of the ``hookbus`` command (an application of the library, like the demo), so it may wire
sinks: the dashboard is :class:`~hookbus.sinks.ConsoleSink`'s own, fed through a replay publisher
in follow mode.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import cast

from rich.console import Console, RenderableType
from rich.live import Live
from rich.text import Text

from hookbus._contract._sink import Sink
from hookbus._rules._validate import seconds
from hookbus._watch._alerts import STATE_FILE, Alerter, Delivery
from hookbus._watch._browse import RUN_KEYS_HELP, OpenRun, browse
from hookbus._watch._keys import BACKSPACE, ESCAPE, LEFT, Keys
from hookbus._watch._run import EXIT_STATUS, WorkerStatus
from hookbus._watch._sweep import FORMATS, Sweep, SweepOptions, find_runs, is_sweep
from hookbus._watch._sweep import follow as follow_sweep
from hookbus._watch._sweep import once as sweep_once
from hookbus._watch._view import NotAnEventLogError
from hookbus._watch._watch import Rendering, Watch
from hookbus.sinks import ConsoleSink
from hookbus.sinks.console._cluster import watch_frame, watch_snapshot
from hookbus.sinks.console._render import Snapshot, plain_line, plain_summary
from hookbus.sinks.console._terminal import TerminalDisplay, wants_live

__all__ = ["STATUS_HELP", "add_watch", "watch_command"]

# The keys that leave a run opened from the table of runs (q quits the watcher as well).
_LEAVE = frozenset({ESCAPE, LEFT, BACKSPACE, "h", "q"})
#: The exit statuses, as ``hookbus watch --help`` lists them.
STATUS_HELP = ", ".join(f"{status} {state}" for state, status in sorted(EXIT_STATUS.items(), key=lambda kv: kv[1]))


def _seconds(name: str) -> Callable[[str], float]:
    """The ``type=`` of a seconds option: :func:`hookbus._rules._validate.seconds` (finite, above 0) on its text."""

    def convert(text: str) -> float:
        try:
            return seconds(name, float(text))
        except ValueError:  # argparse names the option; the message gives the text as typed
            raise argparse.ArgumentTypeError(f"must be a positive finite number of seconds (got {text})") from None

    return convert


def add_watch(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``watch`` subcommand to ``hookbus``'s parser."""
    watch = commands.add_parser(
        "watch",
        help="the live dashboard of a run recorded by EventLogSink, from its log (or a cluster's logs)",
        description="Show ConsoleSink's dashboard for a run that runs elsewhere, from its event log "
        "(EventLogSink's file) or a directory of them (events.jsonl, events.worker-<i>.jsonl: one row per "
        "worker under the chief's dashboard). Reads what is there, then follows it (polling; no inotify, "
        "which misses writes from other NFS clients), and says whether each log is live, stale, presumed "
        "dead, finished, stopped or crashed, and the machine each log sampled (a cluster: a row per worker, "
        "each host's figures once). Exits when the run has ended, unless --follow. A directory "
        "of runs (no log of its own; runs in its subdirectories, e.g. a sweep's runs/lr-0.1/, runs/lr-0.3/) "
        "is a table of runs: one row each, read from the summaries beside their logs, with the "
        "hyper-parameters that differ; --sort, --state, --name and --metric shape it, --once --format "
        "prints it for scripts. In a terminal its keys sort (s, r), filter (f, /), select (arrows) and open "
        "a run (Enter; Esc comes back); it stays up until q.",
        epilog=f"Exit statuses (--once, or when the run ends): {STATUS_HELP}; 2 a file that is not an event "
        "log or a bad option; 130 interrupted.",
    )
    watch.add_argument("path", type=Path, help="an event log, or a directory of them (need not exist yet)")
    watch.add_argument("--once", action="store_true", help="print one plain snapshot and exit with the run's status")
    watch.add_argument("--follow", action="store_true", help="after the run ends, wait for a next run in PATH")
    watch.add_argument(
        "--stale-after",
        type=_seconds("--stale-after"),
        default=None,
        metavar="SECS",
        help="no record for this long: stale (default: 3 expected intervals, at least 3 flush intervals)",
    )
    watch.add_argument(
        "--dead-after",
        type=_seconds("--dead-after"),
        default=120.0,
        metavar="SECS",
        help="no record for this long (and no close): presumed dead (default 120)",
    )
    runs = watch.add_argument_group("a directory of runs")
    runs.add_argument("--format", choices=FORMATS, default="table", help="--once's output (default table)")
    runs.add_argument(
        "--sort",
        metavar="COLUMN",
        default=None,
        help="run, state (worst first), step, rate, a metric (by its best, best first) or a hyper-parameter",
    )
    runs.add_argument("--reverse", action="store_true", help="the other way round")
    runs.add_argument(
        "--state",
        action="append",
        default=[],
        metavar="STATE",
        choices=("live", "stale", "presumed dead", "waiting", "finished", "stopped", "crashed"),
        help="show runs in this state only (repeatable)",
    )
    runs.add_argument("--name", metavar="GLOB", default=None, help="show runs whose name matches (e.g. 'lr-0.*')")
    runs.add_argument(
        "--metric",
        action="append",
        default=[],
        metavar="KEY",
        help="a key to show, latest and best (repeatable; default: up to four, evaluation keys first)",
    )
    alerts = watch.add_argument_group(
        "alerts",
        "one per change of a run's state (finished, stopped, crashed, presumed dead, stale; a non-finite value; "
        "a stall), sent from this process, deduplicated across its restarts by a state file",
    )
    alerts.add_argument(
        "--alert-command",
        metavar="CMD",
        default=None,
        help="run CMD with /bin/sh per alert: the alert as JSON on its stdin, HOOKBUS_RUN, HOOKBUS_STATE, "
        "HOOKBUS_STEP, HOOKBUS_TEXT in its environment",
    )
    alerts.add_argument(
        "--alert-webhook",
        metavar="URL",
        default=None,
        help="POST each alert as JSON to URL (its 'text' field is what Slack shows); never printed whole",
    )
    alerts.add_argument(
        "--alert-state",
        metavar="FILE",
        type=Path,
        default=None,
        help="what was delivered, kept across restarts (default: .hookbus-alerts.json in the directory watched)",
    )
    alerts.add_argument(
        "--stalled-after",
        type=_seconds("--stalled-after"),
        default=None,
        metavar="SECS",
        help="alert when a live run has made no new training step for this long",
    )
    watch.add_argument(
        "--interval",
        type=_seconds("--interval"),
        default=0.5,
        metavar="SECS",
        help="seconds between polls (default 0.5)",
    )


def _make_sink(console: Console, clock: Callable[[], float], name: str) -> Sink:
    # Every recorded step reaches the dashboard; its clock reads the records' times.
    sink: Sink = ConsoleSink(console, live=False, run_name=name, clock=clock, every_n_steps=1, plain_every_n_secs=10.0)
    return sink


def _snapshot(sink: Sink | None) -> Snapshot | None:
    if sink is None:
        return None
    # The watching bus's own costs are not the run's health: the recorded errors show in the footer.
    shown: Snapshot = cast(ConsoleSink, sink).snapshot
    return replace(shown, health=None)


def _frame(sink: Sink | None, statuses: tuple[WorkerStatus, ...], cluster: bool) -> RenderableType:
    snapshot = _snapshot(sink)
    frame: RenderableType = watch_frame(snapshot, statuses, cluster, snapshot.taken_at if snapshot is not None else 0.0)
    return frame


def _plain_line(sink: Sink) -> str:
    snapshot = _snapshot(sink)
    line: str = "" if snapshot is None else plain_line(snapshot)
    return line


def _once(sink: Sink | None, statuses: tuple[WorkerStatus, ...], cluster: bool) -> list[str]:
    lines: list[str] = watch_snapshot(_snapshot(sink), statuses, cluster)
    return lines


def _display(console: Console, get_renderable: Callable[[], RenderableType]) -> TerminalDisplay:
    # ConsoleSink's own terminal display: typed input not echoed, logging routed, cursor restored.
    display: TerminalDisplay = TerminalDisplay(console, True, 4.0, get_renderable)
    return display


def _summary(sink: Sink) -> list[str]:
    snapshot = _snapshot(sink)
    lines: list[str] = [] if snapshot is None else plain_summary(snapshot)
    return lines


RENDERING = Rendering(
    make_sink=_make_sink, frame=_frame, plain_line=_plain_line, snapshot=_once, display=_display, summary=_summary
)


def watch_command(args: argparse.Namespace) -> int:
    """``hookbus watch``: returns the process exit status."""
    console = Console(file=sys.stdout, highlight=False)
    alerter = _alerter(args)
    status = 130
    try:
        status = _watch(args, console, alerter)
        return status
    finally:
        if alerter is not None:  # what is queued goes out; after Ctrl-C, briefly
            alerter.close(deadline=2.0 if status == 130 else 30.0)


def _alerter(args: argparse.Namespace) -> Alerter | None:
    if args.alert_command is None and args.alert_webhook is None:
        return None
    where = args.path if args.path.is_dir() or not args.path.suffix else args.path.parent
    state = args.alert_state if args.alert_state is not None else where / STATE_FILE
    return Alerter(Delivery(args.alert_command, args.alert_webhook), state, stalled_after=args.stalled_after)


def _opener(args: argparse.Namespace, console: Console, sweep: Sweep, alerter: Alerter | None) -> OpenRun:
    """Opens one run of the table in the single-run view, until a key leaves it (the alerts go on
    looking at every run meanwhile); whether that key was ``q``."""

    def open_run(path: Path, keys: Keys) -> bool:
        pressed: list[str] = []

        def leave(timeout: float) -> bool:
            pressed.extend(k for k in keys.read(timeout) if k in _LEAVE)
            return bool(pressed)

        Watch(
            path,
            RENDERING,
            live=True,
            console=console,
            stale_after=args.stale_after,
            dead_after=args.dead_after,
            interval=args.interval,
            on_poll=None if alerter is None else lambda: alerter.observe(sweep.rows()),
            leave=leave,
            footer=f"{path.relative_to(sweep.root).as_posix()}  ·  {RUN_KEYS_HELP}",
        ).run()
        return "q" in pressed

    return open_run


def _first_logs(path: Path, console: Console, interval: float) -> None:
    """Until the directory ``path`` holds a log of its own or a run under it: watched before its
    training started (a sweep launched a moment ago, or not yet), it is a run or a directory of
    runs by what appears first."""

    def found() -> bool:  # a log of its own (path the one run), or runs under it
        return bool(find_runs(path))

    if found():
        return
    said = f"waiting for {path} (no event log there yet: a run's own, or one in a run under it)"
    if not wants_live(console):  # a line, as the views off a terminal say what they wait for
        console.print(said, highlight=False, soft_wrap=True)
        while not found():
            time.sleep(interval)
        return
    # In a terminal the line goes once a log is there: the view that follows has the whole screen.
    with Live(Text(said, no_wrap=True, overflow="ellipsis"), console=console, transient=True, auto_refresh=False):
        while not found():
            time.sleep(interval)


def _watch(args: argparse.Namespace, console: Console, alerter: Alerter | None) -> int:
    if not args.once and (args.path.is_dir() or not args.path.suffix):
        try:
            _first_logs(args.path, console, args.interval)
        except KeyboardInterrupt:
            return 130
    if is_sweep(args.path):
        sweep = Sweep(args.path, stale_after=args.stale_after, dead_after=args.dead_after)
        options = SweepOptions(
            fmt=args.format,
            sort=args.sort,
            reverse=args.reverse,
            states=tuple(args.state),
            name=args.name,
            metrics=tuple(args.metric),
        )
        try:
            if args.once:
                return sweep_once(sweep, options, sys.stdout, console.width, alerter)
            if not wants_live(console):
                return follow_sweep(
                    sweep, options, console, interval=args.interval, keep_following=args.follow, alerter=alerter
                )
            with Keys(sys.stdin) as keys:  # the terminal's own mode back on any way out
                return browse(
                    sweep,
                    options,
                    console,
                    keys=keys,
                    interval=args.interval,
                    keep_following=args.follow,
                    open_run=_opener(args, console, sweep, alerter),
                    alerter=alerter,
                )
        except KeyboardInterrupt:
            return 130
        except ValueError as error:  # an option that names nothing in these runs
            print(f"hookbus watch: {error}", file=sys.stderr)
            return 2
    run = Sweep(
        args.path if args.path.is_dir() or not args.path.suffix else args.path.parent,
        stale_after=args.stale_after,
        dead_after=args.dead_after,
    )
    watch = Watch(
        args.path,
        RENDERING,
        live=not args.once and wants_live(console),
        console=console,
        stale_after=args.stale_after,
        dead_after=args.dead_after,
        interval=args.interval,
        follow=args.follow,
        on_poll=None if alerter is None else lambda: alerter.observe(run.rows()),
    )
    try:
        return watch.once() if args.once else watch.run()
    except NotAnEventLogError as error:
        print(f"hookbus watch: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
