#!/bin/sh
# Lay out the scenario the stand-ins read (as tests/collect/conftest.py does for the test
# sshd), put this host's key and the bot's client key in the shared /keys volume, run sshd.
set -eu
root=/opt/demo
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

mkdir -p /keys
[ -f /keys/host_ed25519 ] || ssh-keygen -q -t ed25519 -N '' -f /keys/host_ed25519
[ -f /keys/client_ed25519 ] || ssh-keygen -q -t ed25519 -N '' -f /keys/client_ed25519
chown 10001 /keys/client_ed25519   # the bot's user in its image; the host key stays root's
cp /keys/client_ed25519.pub /keys/authorized_keys
echo "gpu-demo $(cut -d' ' -f1,2 /keys/host_ed25519.pub)" > /keys/known_hosts.tmp
mv /keys/known_hosts.tmp /keys/known_hosts

cat > /etc/ssh/sshd_config.d/demo.conf <<CONF
HostKey /keys/host_ed25519
AuthorizedKeysFile /keys/authorized_keys
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
SetEnv PATH=$root/bin:/usr/local/bin:/usr/bin:/bin INFERBOT_TEST_SCENARIO=$scenario
CONF
exec /usr/sbin/sshd -D -e
