"""The converters' file names and defaults, light (no pandas, no scipy) so that ``recbole-fbsm convert --help``
shows them before the converters load (``recbole_fbsm.cli.datasets``); ``recbole_fbsm.convert`` uses them."""

# the CTR / CDL format's files (citeulike-a, citeulike-t), by the converter's keyword
CTR_FILES = {"users": "users.dat", "mult": "mult.dat", "vocab": "vocabulary.dat"}
CTR_TAG_FILES = {"tag_item": "tag-item.dat", "tag_names": "tags.dat"}
PAPER_MAX_DF = 0.2  # keep terms found in at most this fraction of the items (the paper)
TAG_SEP = "|"  # default separator of several tags inside one cell (as in MovieLens' genre lists)
