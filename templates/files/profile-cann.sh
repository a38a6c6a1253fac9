# Login shells: load CANN's environment (see /etc/provision/cann-env.sh).
. /etc/provision/cann-env.sh
