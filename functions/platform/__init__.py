"""The platform's own controllers, as this product sees them.

Open Data Hub / OpenShift AI run their own trainer-operator and training operator next to (or
instead of) ours. Both our Trainer and our training-job controllers must know about them, and
neither package may import the other, so what they share lives here: the pure rules in
:mod:`functions.platform.core.coexistence`, the cluster reader in
:mod:`functions.platform.coexistence`, and a per-process memo of the reader's answer in
:mod:`functions.platform.memo`.
"""
