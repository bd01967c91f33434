"""Settings: the section base and the daemon's core keys, the collector names, bounded file
reads and error wording (all below the collector registry), and ``config.py``, which
composes them with the registry (the composition root: nothing below imports it)."""
