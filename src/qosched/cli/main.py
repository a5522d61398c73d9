"""``qosched``: one sub-command group per level (``sim``, ``trace``, ``demo``, ``infer``,
``gpu``), the local service's commands (``up``, ``submit``, ``status``, ``logs``, ``cancel``,
``down``, ``web``), the Kubernetes backend's (``k8s``), and ``completion`` (shell completion,
which answers a completion script before anything else: ``qosched.cli.completion``).

Start-up stays fast because only the command that runs is built: ``build_parser(command)``
imports the module of that one command and lists every other by name and help line alone, so
``qosched --help`` or ``qosched status`` never import PyTorch, SciPy or matplotlib. A module
imported here must in turn import at its top only what building its parser needs.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from qosched import __version__
from qosched.core.errors import QoschedError
from qosched.core.registry import PluginWarning
from qosched.core.third_party import ignore_library_notices

Adder = Callable[[argparse._SubParsersAction], None]


def _add_sim(groups: argparse._SubParsersAction) -> None:
    from qosched.cli import cluster

    sim = groups.add_parser("sim", help=HELP["sim"])
    cluster.add_sim_cluster(sim.add_subparsers(dest="command", required=True, metavar="LEVEL"))


def _add_trace(groups: argparse._SubParsersAction) -> None:
    from qosched.cli import cluster

    trace = groups.add_parser("trace", help=HELP["trace"])
    commands = trace.add_subparsers(dest="command", required=True, metavar="ACTION")
    cluster.add_trace_generate(commands)


def _add_demo(groups: argparse._SubParsersAction) -> None:
    from qosched.cli import demo

    demo.add_demo(groups)


def _add_infer(groups: argparse._SubParsersAction) -> None:
    from qosched.cli import infer

    infer.add_infer(groups)


def _add_gpu(groups: argparse._SubParsersAction) -> None:
    from qosched.cli import gpu, gpu_run, gpu_sim

    commands = gpu.add_commands(groups)
    gpu_sim.add_gpu_sim(commands)
    gpu_run.add_gpu_run(commands)


def _add_local(groups: argparse._SubParsersAction) -> None:
    from qosched.cli import local

    local.add_commands(groups)


def _add_k8s(groups: argparse._SubParsersAction) -> None:
    from qosched.cli import k8s

    k8s.add_commands(groups)


def _add_completion(groups: argparse._SubParsersAction) -> None:
    from qosched.cli import completion

    completion.add_completion(groups)


@dataclass(frozen=True, slots=True)
class _Module:
    """The top-level commands one ``add`` function registers, in the order ``--help`` lists."""

    commands: tuple[str, ...]
    add: Adder


_MODULES = (
    _Module(("sim",), _add_sim),
    _Module(("trace",), _add_trace),
    _Module(("demo",), _add_demo),
    _Module(("infer",), _add_infer),
    _Module(("gpu",), _add_gpu),
    _Module(("up", "submit", "status", "logs", "cancel", "down", "web"), _add_local),
    _Module(("k8s",), _add_k8s),
    _Module(("completion",), _add_completion),
)

#: Each top-level command's help line, shown by ``qosched --help`` without importing its module.
#: The module registers the same text when the command is built (a test checks they agree).
HELP = {
    "sim": "simulate a level of the stack",
    "trace": "make and convert job traces",
    "demo": "run the bundled real training workload under qos and fifo and compare",
    "infer": "multi-tenant inference on one CPU+GPU machine",
    "gpu": "share one GPU between applications by priority",
    "up": "start the local scheduler service on this machine's CPU cores",
    "submit": "submit training jobs (YAML specs) to the local service",
    "status": "show the local service's jobs, or one job in detail",
    "logs": "print a job's output, or follow it as it grows",
    "cancel": "cancel jobs",
    "down": "stop the local service (running jobs are checkpointed and resume at the next up)",
    "web": "print a new login URL for the local service's web page",
    "k8s": "run qosched on a Kubernetes cluster",
    "completion": "print the script that completes qosched's commands and options in a shell",
}

COMMANDS = tuple(name for module in _MODULES for name in module.commands)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``qosched`` parser with ``command`` (a top-level command name) built in full, and
    every other command present by name and help line only: enough for ``qosched --help``, not
    for parsing that command's arguments. ``main`` passes the command its arguments name."""
    parser = argparse.ArgumentParser(
        prog="qosched",
        description="Schedule deep-learning work by the quality of service people ask for.",
    )
    parser.add_argument("--version", action="version", version=f"qosched {__version__}")
    groups = parser.add_subparsers(dest="group", required=True, metavar="COMMAND")
    for module in _MODULES:
        if command in module.commands:
            module.add(groups)
            continue
        for name in module.commands:
            groups.add_parser(name, help=HELP[name], add_help=False).set_defaults(
                run=_unbuilt(name)
            )
    return parser


def _unbuilt(name: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        raise QoschedError(f"internal error: `{name}` was parsed without being built")

    return run


def command_of(argv: Sequence[str]) -> str | None:
    """The top-level command ``argv`` names: its first argument that is not an option (the
    top-level options, ``--help`` and ``--version``, take no value)."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


_format_warning = warnings.formatwarning


def format_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    line: str | None = None,
) -> str:
    """A plug-in left out is the user's to fix, not qosched's: it reads as the command's own
    warning, without the source line that registered the parser."""
    if issubclass(category, PluginWarning):
        return f"qosched: warning: {message}\n"
    return _format_warning(message, category, filename, lineno, line)


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None and "_ARGCOMPLETE" in os.environ:
        # A completion script asks (`qosched completion`): print the completions and exit.
        from qosched.cli.completion import complete

        complete(build_parser, command_of)
    argv = list(sys.argv[1:] if argv is None else argv)
    warnings.formatwarning = format_warning
    parser = build_parser(command_of(argv))
    args = parser.parse_args(argv)
    try:
        with warnings.catch_warnings():
            # What PyTorch and the other libraries deprecate in their own code is for their
            # developers, not for the output of a command; qosched's own warnings still show.
            ignore_library_notices()
            return args.run(args)
    except QoschedError as exc:
        print(f"qosched: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        if exc.filename is None:
            raise
        # A file the command could not read or write (a full disk, a folder root may not
        # write in: checks made before the run cannot foresee every one).
        print(f"qosched: error: {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("qosched: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
