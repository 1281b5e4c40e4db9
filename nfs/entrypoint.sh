#!/bin/sh
# Generate ganesha.conf from settings and run NFS-Ganesha in the foreground.
#
# NFS_CLIENTS          required: who may mount: IPv4/IPv6 addresses or CIDR networks, comma
#                      separated, no spaces, e.g. 192.168.1.0/24 or 10.0.0.2,10.0.0.3
#                      (no "*", no host names, no netgroups)
# NFS_ALLOW_ANY_CLIENT yes: allow NFS_CLIENTS to name every host that reaches TCP 2049 (a
#                      prefix length of 0 such as 0.0.0.0/0 or ::/0, or networks that
#                      together cover every address); no (default) refuses such a value
# NFS_EXPORT_PATH      directory inside the container to export        (default /export)
# NFS_PSEUDO_PATH      the path clients mount, NFSv4 pseudo-filesystem  (default /datasets)
#                      (both paths: absolute, letters, digits, "_", "." and "-" only)
# NFS_ACCESS           RO (default) or RW
# NFS_SQUASH           root_squash (default), all_squash or no_root_squash
#
# `nfs-entrypoint --check` validates the settings and exits (0, or 2 naming the setting).
#
# The values are pasted into ganesha.conf's syntax, so each one is checked against a strict
# pattern first: a quote, brace, semicolon or newline in one could close the EXPORT block and
# open another. `bench settings --profile nfs` checks the same on the host, but the container
# may be started by plain `docker compose up`, which does not run it.
set -eu
export LC_ALL=C  # bracket ranges such as A-Z mean ASCII only
# One line on stderr, exit 2; a hostile value cannot split it: unprintables become '?'.
die() { echo "nfs: error: $(printf '%s' "$*" | tr -c '[:print:]' '?' | cut -c1-600)" >&2; exit 2; }

: "${NFS_EXPORT_PATH:=/export}" "${NFS_PSEUDO_PATH:=/datasets}"
: "${NFS_ACCESS:=RO}" "${NFS_SQUASH:=root_squash}" "${NFS_ALLOW_ANY_CLIENT:=no}"

# only VALUE SET: VALUE is made of the characters of the bracket expression SET alone. This
# runs before any grep: grep matches line by line, so a newline must be refused first.
only() { case "$1" in *[!$2]*) return 1;; esac; }
# matches VALUE ERE: the whole VALUE matches the extended regular expression.
matches() { printf '%s\n' "$1" | grep -Eqx -- "$2"; }

# The address patterns; bench/settings.py holds the same ones (tests/test_settings.py runs
# both on one table of values). Decimal parts have no leading zeros: 010 is octal to some
# parsers and decimal to others.
OCTET='(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])'
IPV4="$OCTET(\\.$OCTET){3}"
H='[0-9A-Fa-f]{1,4}'
IPV6="($H:){7}$H|($H:){1,7}:|($H:){1,6}:$H|($H:){1,5}(:$H){1,2}|($H:){1,4}(:$H){1,3}"
IPV6="$IPV6|($H:){1,3}(:$H){1,4}|($H:){1,2}(:$H){1,5}|$H:(:$H){1,6}|:((:$H){1,7}|:)"
IPV6="$IPV6|($H:){6}$IPV4|::(ffff(:0{1,4})?:)?$IPV4|($H:){1,4}:$IPV4"
CLIENT="($IPV4)(/(3[0-2]|[12][0-9]|[0-9]))?|($IPV6)(/(12[0-8]|1[01][0-9]|[1-9]?[0-9]))?"
# An absolute path of plain names: no quotes, braces, semicolons, spaces or "..".
ABSPATH='(/[A-Za-z0-9_.-]+)+'

check_path() {  # check_path SETTING VALUE
  if [ "${#2}" -gt 255 ] || ! only "$2" '/A-Za-z0-9_.-' || ! matches "$2" "$ABSPATH"; then
    die "$1=$2: an absolute path of letters, digits, '_', '.' and '-', e.g. /datasets"
  fi
  case "$2/" in */./*|*/../*) die "$1=$2: no '.' or '..' components";; esac
}

case "$NFS_ALLOW_ANY_CLIENT" in yes|no) ;;
  *) die "NFS_ALLOW_ANY_CLIENT=$NFS_ALLOW_ANY_CLIENT: one of yes, no (default no)";; esac
[ -n "${NFS_CLIENTS:-}" ] || die "NFS_CLIENTS is not set: name the client network, e.g. NFS_CLIENTS=192.168.1.0/24"
if [ "${#NFS_CLIENTS}" -gt 4096 ] || ! only "$NFS_CLIENTS" '0-9A-Fa-f.:/,'; then
  die "NFS_CLIENTS=$NFS_CLIENTS: comma-separated IP addresses or networks without spaces, e.g. 192.168.1.0/24 (no '*', no host names)"
fi
FIX="name the client network (e.g. 192.168.1.0/24), or set NFS_ALLOW_ANY_CLIENT=yes to mean it"
# 0.0.0.0/1,128.0.0.0/1 is 0.0.0.0/0 too: add up the networks' sizes, IPv4 in addresses and
# IPv6 in units of 2^66 addresses (64-bit arithmetic; overlaps only make it refuse sooner).
v4=0 v6=0 rest=$NFS_CLIENTS
while :; do
  client=${rest%%,*}
  matches "$client" "$CLIENT" || die "NFS_CLIENTS=$NFS_CLIENTS: '$client' is not an IP address or network such as 192.168.1.0/24"
  if [ "$NFS_ALLOW_ANY_CLIENT" = no ]; then
    case "$client" in */0) die "NFS_CLIENTS=$NFS_CLIENTS: '$client' lets every host mount the export; $FIX";; esac
    case "$client" in */*) prefix=${client##*/};; *) prefix=;; esac
    case "$client" in
      *:*) [ "${prefix:-128}" -gt 62 ] || v6=$((v6 + (1 << (62 - prefix)))) ;;
      *) v4=$((v4 + (1 << (32 - ${prefix:-32})))) ;;
    esac
    if [ "$v4" -ge $((1 << 32)) ] || [ "$v6" -ge $((1 << 62)) ]; then
      die "NFS_CLIENTS=$NFS_CLIENTS: together these networks let every host mount the export; $FIX"
    fi
  fi
  [ "$rest" != "$client" ] || break
  rest=${rest#*,}
done
case "$NFS_ACCESS" in RO|RW) ;; *) die "NFS_ACCESS=$NFS_ACCESS: one of RO, RW";; esac
case "$NFS_SQUASH" in root_squash|all_squash|no_root_squash) ;;
  *) die "NFS_SQUASH=$NFS_SQUASH: one of root_squash, all_squash, no_root_squash";; esac
check_path NFS_PSEUDO_PATH "$NFS_PSEUDO_PATH"
check_path NFS_EXPORT_PATH "$NFS_EXPORT_PATH"
[ "${1:-}" != --check ] || exit 0
[ -d "$NFS_EXPORT_PATH" ] || die "NFS_EXPORT_PATH=$NFS_EXPORT_PATH is not a directory in the container: mount the export there"

mkdir -p /etc/ganesha /var/run/ganesha
cat > /etc/ganesha/ganesha.conf <<CONF
# Generated by nfs-entrypoint from NFS_* settings; edits are overwritten.
NFS_CORE_PARAM {
    Protocols = 4;          # NFSv4 only: one TCP port, no mountd/statd/NLM
    NFS_Port = 2049;
    Enable_UDP = false;     # TCP only: no UDP listener on 2049
    Enable_NLM = false;
    Enable_RQUOTA = false;  # no rquota listener (port 875)
}
NFSV4 {
    Graceless = true;       # a fresh server has no clients to recover: serve at once
}
NFS_KRB5 {
    Active_krb5 = false;    # AUTH_SYS only; no keytab in the container
}
EXPORT_DEFAULTS {
    Access_Type = None;     # nothing is reachable unless a CLIENT block grants it
}
EXPORT {
    Export_Id = 1;
    Path = "$NFS_EXPORT_PATH";
    Pseudo = "$NFS_PSEUDO_PATH";
    Protocols = 4;
    Transports = TCP;
    SecType = sys;
    Squash = $NFS_SQUASH;
    Access_Type = None;
    FSAL { Name = VFS; }
    CLIENT {
        Clients = $NFS_CLIENTS;
        Protocols = 4;
        Access_Type = $NFS_ACCESS;
    }
}
LOG { Default_Log_Level = WARN; }
CONF
echo "nfs: exporting $NFS_EXPORT_PATH as $NFS_PSEUDO_PATH ($NFS_ACCESS, $NFS_SQUASH) to $NFS_CLIENTS on TCP 2049" >&2

# No rpcbind (port 111): an NFSv4 client finds the server on 2049 without the portmapper,
# and Ganesha registers NFSv4 with rpcbind only where one runs (nfs_rpc_dispatcher_thread.c:
# "v4 registration is optional"). No dbus-daemon: nothing here talks to Ganesha over D-Bus.
# So the log's "Cannot register NFS V4 on TCP" and "no DBUS connection" lines are expected.
exec ganesha.nfsd -F -L /dev/stderr -f /etc/ganesha/ganesha.conf -N NIV_WARN
