"""Command-line helpers shared by ``run_recbole.py`` and ``recbole-fbsm compare``."""


def settings_from_args(parser, rest, reserved=None):
    """RecBole-style ``--key=value`` settings from the arguments argparse did not know.

    Values stay strings: RecBole's Config converts them ('0.01', '[10, 20]', 'True') as it does for its
    own command line. ``reserved`` maps keys that may not be given this way to the reason. A key given twice
    is an error.
    """
    reserved = reserved or {}
    settings = {}
    for item in rest:
        key, _, value = item[2:].partition("=") if item.startswith("--") else ("", "", "")
        if not key or "=" not in item:
            parser.error(f"unrecognised argument {item!r}: settings are given as --key=value")
        if key in reserved:
            parser.error(f"--{key} cannot be given as a setting: {reserved[key]}")
        if key in settings:  # argparse and RecBole would take the last one silently
            parser.error(f"--{key} is given twice (--{key}={settings[key]} and --{key}={value}); expected it once")
        settings[key] = value
    return settings
