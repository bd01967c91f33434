"""The serving section (``serving:``): targets, their credentials and TLS, and the caps,
next to the source that reads them."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, SecretStr, field_validator, model_validator

from exporter.settings.section import MAX_INTERVAL, MAX_LABEL_CHARS, Section, printable_setting


class Authorization(Section):
    """``Authorization: <type> <credentials>`` on every scrape (Prometheus's spelling)."""

    type: str = "Bearer"
    credentials: SecretStr | None = None
    credentials_file: str = ""
    """Read again whenever its mtime changes, so a rotated token needs no restart."""

    @model_validator(mode="after")
    def _one_source(self) -> Authorization:
        if self.type.strip().lower() == "basic":
            raise ValueError("authorization type Basic: use basic_auth instead")
        if (self.credentials is None) == (not self.credentials_file):
            raise ValueError("authorization needs exactly one of credentials, credentials_file")
        return self


class BasicAuth(Section):
    """HTTP basic authentication (Prometheus's ``basic_auth``)."""

    username: str
    password: SecretStr | None = None
    password_file: str = ""
    """Read again whenever its mtime changes."""

    @model_validator(mode="after")
    def _one_source(self) -> BasicAuth:
        if self.password is not None and self.password_file:
            raise ValueError("basic_auth takes password or password_file, not both")
        return self


class TlsConfig(Section):
    """How to reach an https target (Prometheus's ``tls_config``); files are read again
    when they change."""

    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    server_name: str = ""
    insecure_skip_verify: bool = False

    @model_validator(mode="after")
    def _pair(self) -> TlsConfig:
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError("tls_config needs cert_file and key_file together")
        return self


class ServingTarget(Section):
    """One engine endpoint; see docs/serving.md for how GPUs are attributed."""

    url: str = Field(max_length=2048)
    gpus: list[Annotated[str, Field(max_length=128)]] = Field(
        default_factory=list, max_length=64
    )
    engine: str = ""
    model: str = Field("", max_length=MAX_LABEL_CHARS)
    pid: int | None = Field(None, gt=0)
    authorization: Authorization | None = None
    basic_auth: BasicAuth | None = None
    tls_config: TlsConfig | None = None

    @model_validator(mode="after")
    def _one_auth(self) -> ServingTarget:
        if self.authorization is not None and self.basic_auth is not None:
            raise ValueError("a target takes authorization or basic_auth, not both")
        return self

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        from exporter.urls import normalise

        normalise(value)  # BadUrl (a ValueError) names the URL, redacted
        return value

    @field_validator("model")
    @classmethod
    def _printable_model(cls, value: str) -> str:
        return printable_setting(value, "serving target model")

    @field_validator("gpus")
    @classmethod
    def _printable_gpus(cls, value: list[str]) -> list[str]:
        for gpu in value:
            printable_setting(gpu, "serving target gpu")
        return value

    @field_validator("engine")
    @classmethod
    def _check_engine(cls, value: str) -> str:
        if not value:
            return value
        from exporter.sources.serving.engines import ENGINE_NAMES

        if value not in ENGINE_NAMES:
            raise ValueError(f"unknown engine {value!r}; known: {', '.join(sorted(ENGINE_NAMES))}")
        return value


class ServingConfig(Section):
    """Scraping serving engines (vLLM, SGLang, TGI, Triton, ...)."""

    targets: list[ServingTarget] = Field(default_factory=list)
    extra_targets: list[Annotated[str, Field(max_length=2048)]] = Field(default_factory=list)
    """Scrape this serving engine's /metrics (repeatable), in addition to targets."""
    interval: float = Field(1.0, gt=0, le=MAX_INTERVAL)
    """Seconds between scrape rounds: 1 s keeps token rates as fresh as the GPU's."""
    timeout: float = Field(2.0, gt=0)
    max_body_bytes: int = Field(8 * 1024 * 1024, gt=0)
    max_concurrency: int = Field(8, gt=0)
    """Scrapes in flight at most. Slots go to the tenant (a pod's namespace; a configured
    target is its own) that used least of them, and scrapes past half a round hold at
    most half: a tenant's slow or hung pods cost that tenant's share, not the others'."""
    discover_pods: bool = False
    """Scrape annotated pods on this node (a Kubernetes API watch for the serving
    annotations)."""
    annotation_prefix: str = "serving.goodput.dev/"
    max_targets: int = Field(64, gt=0, le=10_000)
    """Targets scraped at most (static and discovered together); a config listing more is
    refused, discovered pods past it are dropped and counted. Each target costs about ten
    series, a scrape slot and a parse per interval."""
    max_targets_per_namespace: int = Field(16, gt=0, le=10_000)
    """Discovered pods of one namespace scraped at most; more are dropped and counted
    (max_targets_per_namespace). Places under max_targets go to namespaces in turn, and the
    turn rotates every round, so no tenant's pods take every place and no name order keeps
    a tenant out."""
    max_models_per_target: int = Field(8, gt=0, le=1000)
    """Model label values one target may publish; more are dropped and counted
    (max_models), so an engine that renames its model every scrape cannot grow series."""
    max_label_length: int = Field(200, ge=16, le=4096)
    """Model label values are cut to this many characters (counted as label_too_long)."""
    stale_after: float = Field(300.0, gt=0, le=86400)
    """Seconds after which a model (or a down target) no reading mentioned loses its series
    and its place under max_models_per_target."""
    max_tokens_per_second_per_gpu: float = Field(2e6, gt=0, allow_inf_nan=False)
    """Token growth per GPU per second above this is implausible: dropped and counted. See
    docs/serving.md "Trust" for how the default was chosen."""

    @field_validator("targets", mode="before")
    @classmethod
    def _url_shorthand(cls, value: Any) -> Any:
        """``- http://host:8000/metrics`` in a targets list means ``- url: ...``."""
        if isinstance(value, list):
            return [{"url": v} if isinstance(v, str) else v for v in value]
        return value

    @field_validator("extra_targets")
    @classmethod
    def _check_extra(cls, value: list[str]) -> list[str]:
        from exporter.urls import normalise

        for url in value:
            normalise(url)
        return value

    @model_validator(mode="after")
    def _one_label_per_target(self) -> ServingConfig:
        """Two targets that would publish one ``target`` label (they differ only in
        credentials or secret query values) would mix their series and count tokens twice:
        refused. Spellings of one URL (case, default port, fragment, loopback aliases) are
        merged later."""
        if not self.targets and not self.extra_targets:
            return self
        from exporter.urls import label, normalise

        seen: dict[str, tuple[str, object]] = {}
        entries = [(t.url, (t.authorization, t.basic_auth, t.tls_config)) for t in self.targets]
        entries += [(url, (None, None, None)) for url in self.extra_targets]
        for url, access in entries:
            key = normalise(url)
            name = label(key)
            first = seen.setdefault(name, (key, access))
            if first != (key, access):
                raise ValueError(
                    f"two serving targets publish the same target label {name!r} (they differ "
                    "only in credentials, TLS settings or secret query values); list one"
                )
        return self

    @model_validator(mode="after")
    def _under_cap(self) -> ServingConfig:
        count = len(self.targets) + len(self.extra_targets)
        if count > self.max_targets:
            raise ValueError(
                f"{count} serving targets configured, more than max_targets "
                f"({self.max_targets}); raise serving.max_targets or list fewer"
            )
        return self
