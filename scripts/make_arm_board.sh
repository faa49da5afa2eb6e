#!/usr/bin/env bash
# Build and start an emulated aarch64 "board" on this machine, reachable over ssh.
#
#   scripts/make_arm_board.sh [start]   build what is missing (idempotent), (re)start sshd, print how to reach it
#   scripts/make_arm_board.sh stop      stop the board's sshd and unmount /proc, /dev inside its root
#   scripts/make_arm_board.sh status    say whether it is running
#   scripts/make_arm_board.sh clean     stop, then delete the board directory
#
# What "start" does (each step is skipped when already done):
#   1. host packages (apt): qemu-user-static binfmt-support debootstrap g++-aarch64-linux-gnu openssh-client
#   2. binfmt_misc mounted and qemu-aarch64 registered, so aarch64 binaries run under emulation
#   3. debootstrap --arch=arm64 --variant=minbase bookworm with python3 python3-venv openssh-server
#      (mirror: $BOARD_MIRROR, else the first Debian mirror in this machine's apt sources)
#   4. the aarch64 wheels of apache-tvm, apache-tvm-ffi, numpy and cloudpickle (TVM's RPC server, for
#      tuning on the board, needs it) (pip download --platform
#      manylinux_2_28_aarch64 --only-binary=:all:), installed into /opt/nnadapter-tvm/venv in the
#      root under emulation, plus this package (a wheel built from a copy of the source tree; reinstalled
#      on every start so the board runs the current code)
#   5. an ssh client key and a host key (generated here), a user "board" whose authorized_keys holds
#      the client key, a known_hosts file pinning the host key
#   6. sshd from the arm64 root (so under emulation) on 127.0.0.1:$BOARD_PORT (default 2222)
#   7. BOARD_DIR/board.env with the facts (host, port, key, known_hosts, python) for deploy and tests:
#        NNADAPTER_TVM_BOARD=BOARD_DIR/board.env pytest -m slow tests/e2e/test_arm_board.py
#
# Environment: BOARD_DIR (default <repo>/.board), BOARD_PORT (2222), BOARD_MIRROR, BOARD_SUITE (bookworm),
# PYTHON (host python used for pip; default <repo>/.venv/bin/python, else python3).
# Needs root (apt, mount, chroot).  The emulated board is for correctness only: its latency is not a figure.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
BOARD_DIR=${BOARD_DIR:-$REPO/.board}
BOARD_PORT=${BOARD_PORT:-2222}
BOARD_SUITE=${BOARD_SUITE:-bookworm}
ROOT=$BOARD_DIR/root
WHEELS=$BOARD_DIR/wheels
BOARD_USER=board
BOARD_VENV=/opt/nnadapter-tvm/venv
SSHD_CONFIG=/etc/ssh/nnadapter_board_sshd_config
SSHD_PID=/run/nnadapter-board-sshd.pid
TVM_PIN=apache-tvm==0.27.0.post1
FFI_PIN=apache-tvm-ffi==0.1.14.post0
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x "$REPO/.venv/bin/python" ]]; then PYTHON=$REPO/.venv/bin/python; else PYTHON=python3; fi
fi

# Commands in the root run with a clean environment: the host's PIP_*, PYTHON* and the like stay out.
in_root() {
    env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
        chroot "$ROOT" "$@"
}

say() { printf '[board %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() {
    printf 'make_arm_board: error: %s\n' "$*" >&2
    exit 1
}

need_root() { [[ $(id -u) -eq 0 ]] || die "run as root (it uses apt, mount and chroot)"; }

# -- mounts inside the root ------------------------------------------------------------------
mounts_under_root() { awk -v r="$ROOT/" '{ if (index($2 "/", r) == 1) print $2 }' /proc/mounts | sort -r; }

# /dev in the root is its own small tmpfs with the few nodes a board needs, not a bind mount of the
# host's /dev: deleting .board (even with a plain rm -rf or git clean) can then never reach host devices.
mount_board() {
    mkdir -p "$ROOT/proc" "$ROOT/dev"
    mountpoint -q "$ROOT/proc" || mount -t proc proc "$ROOT/proc"
    if ! mountpoint -q "$ROOT/dev"; then
        mount -t tmpfs -o mode=755,size=1m,nosuid tmpfs "$ROOT/dev"
        local node
        for node in "null 1 3" "zero 1 5" "full 1 7" "random 1 8" "urandom 1 9" "tty 5 0"; do
            set -- $node
            mknod -m 666 "$ROOT/dev/$1" c "$2" "$3"
        done
        mkdir -p "$ROOT/dev/pts" "$ROOT/dev/shm"
        ln -s /proc/self/fd "$ROOT/dev/fd"
        ln -s /proc/self/fd/0 "$ROOT/dev/stdin"
        ln -s /proc/self/fd/1 "$ROOT/dev/stdout"
        ln -s /proc/self/fd/2 "$ROOT/dev/stderr"
    fi
    if ! mountpoint -q "$ROOT/dev/pts"; then
        mount -t devpts -o newinstance,ptmxmode=0666,mode=620 devpts "$ROOT/dev/pts" && ln -sf pts/ptmx "$ROOT/dev/ptmx"
    fi
}

unmount_board() {
    local m
    for m in $(mounts_under_root); do umount "$m" || umount -l "$m"; done
}

# -- sshd --------------------------------------------------------------------------------------
sshd_pid() {
    local pid
    [[ -f "$ROOT$SSHD_PID" ]] || return 1
    pid=$(cat "$ROOT$SSHD_PID")
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null && [[ $(readlink "/proc/$pid/root" 2>/dev/null) == "$ROOT" ]] || return 1
    echo "$pid"
}

stop_sshd() {
    local pid
    if pid=$(sshd_pid); then
        say "stopping sshd (pid $pid)"
        kill "$pid"
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    fi
    rm -f "$ROOT$SSHD_PID"
}

cmd_stop() {
    need_root
    [[ -d "$ROOT" ]] || { say "no board at $BOARD_DIR"; return 0; }
    stop_sshd
    unmount_board
    say "stopped"
}

cmd_status() {
    local pid
    if [[ -d "$ROOT" ]] && pid=$(sshd_pid); then
        say "running: sshd pid $pid; facts in $BOARD_DIR/board.env"
        cat "$BOARD_DIR/board.env"
    else
        say "not running (start it with: $0 start)"
        return 1
    fi
}

cmd_clean() {
    cmd_stop
    [[ -z "$(mounts_under_root)" ]] || die "something is still mounted under $ROOT; not deleting"
    say "deleting $BOARD_DIR"
    rm -rf --one-file-system "$BOARD_DIR"
}

# -- building ----------------------------------------------------------------------------------
host_packages() {
    local missing=() p
    for p in qemu-user-static binfmt-support debootstrap g++-aarch64-linux-gnu openssh-client; do
        dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
    done
    if ((${#missing[@]})); then
        say "apt-get install ${missing[*]}"
        apt-get -q update >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q -o DPkg::Lock::Timeout=600 "${missing[@]}" >/dev/null
    fi
}

binfmt() {
    mountpoint -q /proc/sys/fs/binfmt_misc || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
    if [[ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]]; then
        say "registering qemu-aarch64 with binfmt_misc"
        update-binfmts --enable qemu-aarch64 2>/dev/null || update-binfmts --import qemu-aarch64
    fi
    [[ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]] || die "qemu-aarch64 is not registered with binfmt_misc"
    grep -q '^flags:.*F' /proc/sys/fs/binfmt_misc/qemu-aarch64 ||
        die "qemu-aarch64 is registered without the F (fix binary) flag; chroots cannot find the interpreter"
}

apt_mirror() {
    if [[ -n "${BOARD_MIRROR:-}" ]]; then echo "$BOARD_MIRROR"; return; fi
    local m
    m=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null |
        grep -v '^\s*#' | grep -oE 'https?://[^ ]+' | grep -v security | grep -E '/debian/?$' | head -n1 || true)
    echo "${m:-http://deb.debian.org/debian}"
}

bootstrap_root() {
    if [[ -f "$ROOT/.nnadapter-board-bootstrapped" ]]; then return; fi
    if [[ -d "$ROOT" ]]; then
        say "removing an incomplete root"
        unmount_board
        [[ -z "$(mounts_under_root)" ]] || die "something is still mounted under $ROOT"
        rm -rf --one-file-system "$ROOT"
    fi
    local mirror
    mirror=$(apt_mirror)
    say "debootstrap arm64 $BOARD_SUITE minbase from $mirror (a few minutes; log: $BOARD_DIR/debootstrap.log)"
    if ! debootstrap --arch=arm64 --variant=minbase --include=python3,python3-venv,openssh-server \
        "$BOARD_SUITE" "$ROOT" "$mirror" >"$BOARD_DIR/debootstrap.log" 2>&1; then
        tail -n 20 "$BOARD_DIR/debootstrap.log" >&2
        die "debootstrap failed (full log: $BOARD_DIR/debootstrap.log)"
    fi
    in_root /usr/bin/uname -m | grep -q aarch64 || die "the root does not run aarch64 binaries"
    touch "$ROOT/.nnadapter-board-bootstrapped"
}

board_python_tag() { in_root /usr/bin/python3 -c 'import sys; print("%d%d" % sys.version_info[:2])'; }

python_env() {
    local tag venv_py=$ROOT$BOARD_VENV/bin/python
    tag=$(board_python_tag)
    if [[ ! -x "$venv_py" ]]; then
        say "creating $BOARD_VENV on the board"
        in_root /usr/bin/python3 -m venv "$BOARD_VENV"
    fi
    mkdir -p "$ROOT/opt/nnadapter-tvm/wheels"
    if ! in_root "$BOARD_VENV/bin/python" -c \
        "import tvm, tvm_ffi, numpy, cloudpickle; assert tvm.__version__ == '${TVM_PIN#*==}' and tvm_ffi.__version__ == '${FFI_PIN#*==}'" \
        2>/dev/null; then
        mkdir -p "$WHEELS/deps"
        say "aarch64 wheels for cp$tag ($TVM_PIN, $FFI_PIN, numpy, cloudpickle and their dependencies)"
        "$PYTHON" -m pip download -q --dest "$WHEELS/deps" --platform manylinux_2_28_aarch64 \
            --python-version "$tag" --implementation cp --abi "cp$tag" --only-binary=:all: \
            "$TVM_PIN" "$FFI_PIN" "numpy>=1.24" "cloudpickle>=2"
        cp "$WHEELS"/deps/*.whl "$ROOT/opt/nnadapter-tvm/wheels/"
        say "installing the wheels under emulation (about a minute)"
        in_root "$BOARD_VENV/bin/pip" install -q --no-index --find-links /opt/nnadapter-tvm/wheels \
            "$TVM_PIN" "$FFI_PIN" numpy cloudpickle
    fi
    # This package: pure Python, built here from a copy of the source tree, reinstalled every time.
    say "installing nnadapter-tvm from $REPO"
    rm -rf "$WHEELS/src" "$WHEELS/pkg"
    mkdir -p "$WHEELS/src" "$WHEELS/pkg"
    cp -r "$REPO/pyproject.toml" "$REPO/README.md" "$REPO/nnadapter_tvm" "$REPO/op_converters" "$REPO/targets" \
        "$WHEELS/src/"
    find "$WHEELS/src" -name __pycache__ -prune -exec rm -rf {} +
    "$PYTHON" -m pip wheel -q --no-deps -w "$WHEELS/pkg" "$WHEELS/src" >/dev/null
    cp "$WHEELS"/pkg/nnadapter_tvm-*.whl "$ROOT/opt/nnadapter-tvm/wheels/"
    # --no-deps: the board needs the TVM runtime and numpy only (not onnx or the test tools).
    in_root /bin/sh -c "$BOARD_VENV/bin/pip install -q --no-deps --force-reinstall \
        /opt/nnadapter-tvm/wheels/nnadapter_tvm-*.whl"
}

ssh_setup() {
    [[ -f "$BOARD_DIR/id_ed25519" ]] || ssh-keygen -q -t ed25519 -N '' -C nnadapter-board-client -f "$BOARD_DIR/id_ed25519"
    [[ -f "$BOARD_DIR/ssh_host_ed25519_key" ]] ||
        ssh-keygen -q -t ed25519 -N '' -C nnadapter-board-host -f "$BOARD_DIR/ssh_host_ed25519_key"
    chmod 600 "$BOARD_DIR/id_ed25519" "$BOARD_DIR/ssh_host_ed25519_key"
    install -m 600 "$BOARD_DIR/ssh_host_ed25519_key" "$ROOT/etc/ssh/nnadapter_board_host_ed25519_key"
    if ! in_root /usr/bin/id -u "$BOARD_USER" >/dev/null 2>&1; then
        in_root /usr/sbin/useradd -m -s /bin/bash "$BOARD_USER"
    fi
    # "*" = no password, but not locked: sshd (UsePAM no) refuses key logins to locked ("!") accounts.
    in_root /usr/sbin/usermod -p '*' "$BOARD_USER"
    local home=$ROOT/home/$BOARD_USER
    install -d -m 700 "$home/.ssh"
    install -m 600 "$BOARD_DIR/id_ed25519.pub" "$home/.ssh/authorized_keys"
    in_root /bin/chown -R "$BOARD_USER:$BOARD_USER" "/home/$BOARD_USER/.ssh"
    cat >"$ROOT$SSHD_CONFIG" <<EOF
# nnadapter-tvm emulated board (scripts/make_arm_board.sh); keys only, loopback only.
Port $BOARD_PORT
ListenAddress 127.0.0.1
HostKey /etc/ssh/nnadapter_board_host_ed25519_key
PidFile $SSHD_PID
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PermitRootLogin no
AllowUsers $BOARD_USER
AuthorizedKeysFile .ssh/authorized_keys
X11Forwarding no
PrintMotd no
Subsystem sftp /usr/lib/openssh/sftp-server
EOF
    echo "[127.0.0.1]:$BOARD_PORT $(cut -d' ' -f1,2 "$BOARD_DIR/ssh_host_ed25519_key.pub")" >"$BOARD_DIR/known_hosts"
}

ssh_board() {
    ssh -p "$BOARD_PORT" -i "$BOARD_DIR/id_ed25519" -o BatchMode=yes -o IdentitiesOnly=yes \
        -o StrictHostKeyChecking=yes -o UserKnownHostsFile="$BOARD_DIR/known_hosts" -o ConnectTimeout=20 \
        "$BOARD_USER@127.0.0.1" "$@"
}

start_sshd() {
    stop_sshd
    if (exec 3<>"/dev/tcp/127.0.0.1/$BOARD_PORT") 2>/dev/null; then
        die "port $BOARD_PORT on 127.0.0.1 is taken by another program; choose another with BOARD_PORT=..."
    fi
    mkdir -p "$ROOT/run/sshd"
    chmod 755 "$ROOT/run/sshd"
    in_root /usr/sbin/sshd -t -f "$SSHD_CONFIG" || die "the board's sshd rejects its configuration"
    say "starting sshd on 127.0.0.1:$BOARD_PORT (log: $ROOT/var/log/nnadapter-board-sshd.log)"
    in_root /usr/sbin/sshd -f "$SSHD_CONFIG" -E /var/log/nnadapter-board-sshd.log </dev/null >/dev/null 2>&1
    local ok=
    for _ in $(seq 60); do
        if ssh_board true 2>/dev/null; then ok=1; break; fi
        sleep 1
    done
    [[ -n "$ok" ]] || die "sshd did not answer on port $BOARD_PORT (see $ROOT/var/log/nnadapter-board-sshd.log)"
}

cmd_start() {
    need_root
    local t0=$SECONDS
    mkdir -p "$BOARD_DIR"
    # Keep the board (a whole root file system) out of git even without a .gitignore entry.
    [[ -f "$BOARD_DIR/.gitignore" ]] || echo '*' >"$BOARD_DIR/.gitignore"
    host_packages
    binfmt
    bootstrap_root
    mount_board
    python_env
    ssh_setup
    start_sshd
    local facts
    facts=$(ssh_board "$BOARD_VENV/bin/python" -c \
        "'import platform, tvm, nnadapter_tvm; print(platform.machine(), tvm.__version__, nnadapter_tvm.__version__)'")
    cat >"$BOARD_DIR/board.env" <<EOF
# The emulated aarch64 board (scripts/make_arm_board.sh); read by tests/e2e/test_arm_board.py via NNADAPTER_TVM_BOARD.
BOARD_HOST=$BOARD_USER@127.0.0.1
BOARD_PORT=$BOARD_PORT
BOARD_KEY=$BOARD_DIR/id_ed25519
BOARD_KNOWN_HOSTS=$BOARD_DIR/known_hosts
BOARD_PYTHON=$BOARD_VENV/bin/python
BOARD_ROOT=$ROOT
EOF
    say "board ready in $((SECONDS - t0)) s: $facts (machine, tvm, nnadapter_tvm)"
    cat <<EOF

Reach it:
  ssh -p $BOARD_PORT -i $BOARD_DIR/id_ed25519 -o UserKnownHostsFile=$BOARD_DIR/known_hosts $BOARD_USER@127.0.0.1
Deploy to it:
  nnadapter-tvm deploy builtin --host $BOARD_USER@127.0.0.1 --port $BOARD_PORT --identity $BOARD_DIR/id_ed25519 \\
      --known-hosts $BOARD_DIR/known_hosts --verify
Test against it:
  NNADAPTER_TVM_BOARD=$BOARD_DIR/board.env pytest -m slow tests/e2e/test_arm_board.py
Stop it:
  $0 stop
EOF
}

case "${1:-start}" in
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
clean) cmd_clean ;;
*) die "usage: $0 [start|stop|status|clean]" ;;
esac
