#!/usr/bin/env bash
# Write the sha256 of every wheel the image may install into requirements.txt and
# requirements-build.txt (pip's --require-hashes format), from the pins already there.
#
# The image installs wheels only (--only-binary=:all:) for CPython 3.12 on glibc 2.34 (UBI 9),
# x86_64 or aarch64; pip picks the wheel with the best tag for that platform, so each pin is
# downloaded as pip there would choose it, for both architectures, and every file is hashed.
# Run after changing a pin: `bash hack/hash_requirements.sh`.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
pip=${PIP:-$here/.venv/bin/pip}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

platforms() {  # newest manylinux tag first, as pip orders them on glibc 2.34
  local arch=$1 m
  for m in $(seq 34 -1 17); do printf -- '--platform manylinux_2_%s_%s ' "$m" "$arch"; done
  printf -- '--platform manylinux2014_%s ' "$arch"
}

for file in requirements.txt requirements-build.txt; do
  grep -E '^[A-Za-z0-9_.-]+==' "$here/$file" | sed 's/ .*//' > "$work/$file.pins"
done
cat "$work"/*.pins > "$work/all.pins"
for arch in x86_64 aarch64; do
  dest=$work/wheels-$arch
  # shellcheck disable=SC2046  # one word per flag
  "$pip" download --quiet --no-deps --only-binary=:all: $(platforms "$arch") \
    --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none \
    -r "$work/all.pins" -d "$dest"
done

python3 - "$here" "$work" <<'PY'
import hashlib, pathlib, re, sys
here, work = map(pathlib.Path, sys.argv[1:])
hashes: dict[str, set[str]] = {}
for wheel in work.glob("wheels-*/*.whl"):
    name = re.sub(r"[-_.]+", "-", wheel.name.split("-")[0]).lower()
    hashes.setdefault(name, set()).add(hashlib.sha256(wheel.read_bytes()).hexdigest())
for file in ("requirements.txt", "requirements-build.txt"):
    path = here / file
    out = []
    for line in path.read_text().splitlines():
        if line.startswith("    --hash="):
            continue
        match = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line)
        if not match:
            out.append(line)
            continue
        name = re.sub(r"[-_.]+", "-", match.group(1)).lower()
        digests = sorted(hashes[name])
        out.append(f"{match.group(1)}=={match.group(2)} \\")
        out += [f"    --hash=sha256:{d}" + (" \\" if i < len(digests) - 1 else "")
                for i, d in enumerate(digests)]
    path.write_text("\n".join(out) + "\n")
PY
echo "hashed: requirements.txt requirements-build.txt"
