"""The composition root: composes ``Settings`` from the collector registry
(``config``), wires the daemon from it (``daemon``), reloads it on SIGHUP (``reload``) and
says the one start-up line (``startup``). It names no collector; nothing below imports it."""
