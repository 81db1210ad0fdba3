#!/bin/sh
# Lay out the scenario the stand-ins read (as tests/fixtures/sshd.py does for the test
# sshd), put this host's key and the bot's client key in the shared keys volume, run sshd.
# The defaults are the image's paths; the CI smoke test (tests/ops/test_compose_smoke.py) runs
# this same script as a process, pointing the variables at a temporary directory.
set -eu
root=${DEMO_ROOT:-/opt/demo}              # the image's COPY of the stand-ins and recordings
keys=${DEMO_KEYS:-/keys}                  # the volume the bot mounts read-only
config=${DEMO_SSHD_CONFIG:-/etc/ssh/sshd_config.d/demo.conf}   # included by sshd_config
name=${DEMO_KNOWN_HOSTS_NAME:-gpu-demo}   # how the bot's inventory addresses this host
client_uid=${DEMO_CLIENT_UID:-10001}      # the bot's user in its image
scenario=$root/scenario
mkdir -p "$scenario"
for f in "$root/data/scenarios/$DEMO_SCENARIO"/*; do
  sed "s#@ROOT@#$root#g" "$f" > "$scenario/$(basename "$f")"
done
# The served model's config.json in a Hugging Face cache (the container's mount points here).
for cfg in "$root"/data/model_configs/*.json; do
  repo=$(basename "$cfg" .json)
  dir="$root/hf/hub/models--$repo"
  mkdir -p "$dir/snapshots/0123abcd" "$dir/refs"
  printf 0123abcd > "$dir/refs/main"
  tail -n +2 "$cfg" > "$dir/snapshots/0123abcd/config.json"
done

mkdir -p "$keys"
[ -f "$keys/host_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -f "$keys/host_ed25519"
[ -f "$keys/client_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -f "$keys/client_ed25519"
chown "$client_uid" "$keys/client_ed25519"   # the host key stays root's
cp "$keys/client_ed25519.pub" "$keys/authorized_keys"
echo "$name $(cut -d' ' -f1,2 "$keys/host_ed25519.pub")" > "$keys/known_hosts.tmp"
mv "$keys/known_hosts.tmp" "$keys/known_hosts"

cat > "$config" <<CONF
HostKey $keys/host_ed25519
AuthorizedKeysFile $keys/authorized_keys
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
SetEnv PATH=$root/bin:/usr/local/bin:/usr/bin:/bin INFERBOT_TEST_SCENARIO=$scenario
CONF
# DEMO_SSHD_ARGS: extra sshd options (the smoke test's port, address and config file).
# shellcheck disable=SC2086
exec /usr/sbin/sshd -D -e ${DEMO_SSHD_ARGS:-}
