"""Names that schedulers accept, from free-text queue, class and catalog names.

Kubernetes object names, label names and label values, Slurm node/partition/QoS names and Prometheus label values
all accept `[a-z0-9]([-a-z0-9]*[a-z0-9])?` (a DNS-1123 label), so one sanitizer serves every exporter. A name that
had to change gets a short hash of the original appended, so two different originals never collide.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_LABEL_MAX = 63
"""Kubernetes: a DNS-1123 label (namespace names, label name segments and values) is at most 63 characters."""
HASH_CHARS = 6
"""Hex digits of sha1(original) appended to a changed name: 16^6 values keep accidental collisions negligible."""


def dns_label(name: str, max_len: int = DNS1123_LABEL_MAX) -> str:
    """A DNS-1123 label for `name`: lower case, ASCII letters/digits/dashes, at most max_len characters."""
    if max_len < HASH_CHARS + 2:
        raise ValueError(f"max_len must be at least {HASH_CHARS + 2}")
    ascii_ = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    s = re.sub(r"[^a-z0-9]+", "-", ascii_.lower()).strip("-")
    if s == name and len(s) <= max_len:
        return s
    tag = hashlib.sha1(name.encode("utf-8")).hexdigest()[:HASH_CHARS]
    s = s[: max_len - HASH_CHARS - 1].strip("-")
    return f"{s}-{tag}" if s else f"x-{tag}"
