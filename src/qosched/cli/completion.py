"""``qosched completion {bash,zsh,fish}``: the shell script that completes ``qosched``'s
commands, options, choices and job ids on Tab.

The script comes from argcomplete, which completes from the argparse parser itself, so it never
falls behind the commands. It holds no list of them: at each Tab the shell runs ``qosched``
with ``_ARGCOMPLETE`` and the command line in its environment; ``main`` sees that variable
before anything else and calls ``complete``, which builds the parser of the command being
typed (``main.build_parser``: only that command's module is imported), prints the completions
and exits. Without that variable argcomplete is never imported, so a ``qosched`` command that
is not completing starts as fast as it did without it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

PROG = "qosched"
SHELLS = ("bash", "zsh", "fish")
HELP = "print the script that completes qosched's commands and options in a shell"

INSTALL = """\
install it (one line per shell; a new shell picks it up):
  bash  echo 'eval "$(qosched completion bash)"' >> ~/.bashrc
  zsh   echo 'eval "$(qosched completion zsh)"' >> ~/.zshrc   (after compinit)
  fish  qosched completion fish > ~/.config/fish/completions/qosched.fish"""


def add_completion(groups: argparse._SubParsersAction) -> None:
    """Register ``completion`` on the top-level sub-command group."""
    parser = groups.add_parser(
        "completion",
        help=HELP,
        # Broken by hand: this formatter keeps the epilog's lines, and the description's too.
        description="Print a script that makes the shell complete qosched's commands, options,\n"
        "their choices and the ids of the service's jobs on Tab.",
        epilog=INSTALL,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("shell", choices=SHELLS, help="the shell to complete in")
    parser.set_defaults(run=run_completion)


def run_completion(args: argparse.Namespace) -> int:
    import argcomplete

    sys.stdout.write(argcomplete.shellcode([PROG], shell=args.shell))
    sys.stdout.flush()
    return 0


def complete(
    build_parser: Callable[[str | None], argparse.ArgumentParser],
    command_of: Callable[[Sequence[str]], str | None],
) -> None:
    """Print the completions of the command line in the environment (``COMP_LINE`` up to
    ``COMP_POINT``) where the completion script reads them, then exit the process."""
    import argcomplete

    line = os.environ.get("COMP_LINE", "")
    point = int(os.environ.get("COMP_POINT", len(line)))
    # The words before the one being completed; the script says where qosched's arguments
    # start (1: `qosched ...`), as argcomplete counts them.
    words = argcomplete.split_line(line, point)[3]
    start = int(os.environ.get("_ARGCOMPLETE") or 1) - 1
    # Options are offered once a "-" is typed: a bare Tab lists commands, choices and job ids.
    parser = build_parser(command_of(words[start + 1 :]))
    argcomplete.autocomplete(parser, always_complete_options=False)
    # autocomplete exits once it has printed; this is reached only if it did not run.
    raise SystemExit(1)
