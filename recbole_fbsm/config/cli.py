"""Command-line helpers shared by ``run_recbole.py`` and ``recbole-fbsm compare``."""

import os
import shlex
import sys


def parse_with_settings(parser, argv, reserved=None):
    """(options, settings): ``parser``'s options, and the other arguments as ``--key=value`` settings (strings, which
    the Config converts); ``reserved`` maps keys that may not be given so to the reason. A key given twice is an error.
    """
    args, rest = parser.parse_known_args(argv)
    reserved, settings = reserved or {}, {}
    for item in rest:
        key, equals, value = item[2:].partition("=")
        if not item.startswith("--") or not key or not equals:
            parser.error(f"unrecognised argument {item!r}: settings are given as --key=value")
        if key in reserved:
            parser.error(f"--{key} cannot be given as a setting: {reserved[key]}")
        if key in settings:  # argparse and RecBole would take the last one silently
            parser.error(f"--{key} is given twice (--{key}={settings[key]} and --{key}={value}); expected it once")
        settings[key] = value
    return args, settings


def typed_command(argv, prog, process_argv=None, original_argv=None):
    """The command line as the user typed it, shell-quoted, for a record such as compare's table.md: when ``argv``
    ends ``sys.argv`` (after the script and at most the command's name), a console script by its name (not the full
    path the shell hands over), ``python -m ...`` and ``python script.py ...`` as given (``sys.orig_argv``); a call
    from Python with arguments of its own (``main([...])``), ``prog`` followed by them."""
    process_argv = list(sys.argv if process_argv is None else process_argv)
    original_argv = list(getattr(sys, "orig_argv", process_argv) if original_argv is None else original_argv)
    argv = list(argv)
    prefix = process_argv[: len(process_argv) - len(argv)]
    from_process = process_argv[len(prefix) :] == argv and (
        len(prefix) == 1 or (len(prefix) == 2 and prefix[1] == str(prog).split()[-1])
    )
    if not from_process:
        return shlex.join([*str(prog).split(), *argv])
    if "-m" in original_argv[1:3] or prefix[0].endswith(".py"):  # python -m MODULE ..., python run_recbole.py ...
        return shlex.join(original_argv)
    return shlex.join([os.path.basename(prefix[0]), *process_argv[1:]])
