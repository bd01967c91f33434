"""docs/settings.md is generated from the settings schema (each collector's section, its
flags) and must match it."""

from exporter.docgen import settings as settings_docs


def test_settings_doc_is_current() -> None:
    assert settings_docs.main(["--check"]) == 0, "run: python -m exporter.docgen.settings"


def test_every_collector_flag_and_section_key_is_listed() -> None:
    from exporter.collectors import REGISTRY

    text = settings_docs.render()
    for c in REGISTRY:
        for flag in c.flags:
            assert f"`{flag.flag}" in text and f"`{c.section}.{flag.key}`" in text
