# PostgreSQL for the records-store tests (tests/test_db*.py, tests/test_fleet.py): Debian's
# server, one cluster on loopback, a role and a database of the tests' own. Idempotent.
# Exports TENSORTUNE_TEST_POSTGRES_URL, which the tests need (they fail without it).
tt_pg_user=tensortune
tt_pg_password=tensortune
tt_pg_db=tensortune_test
if ! command -v pg_lsclusters >/dev/null 2>&1 || ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq postgresql >/dev/null
fi
tt_pg_version=$(ls /usr/lib/postgresql | sort -V | tail -n 1)
if ! pg_lsclusters -h | awk '{print $1" "$2}' | grep -qx "$tt_pg_version main"; then
    pg_createcluster "$tt_pg_version" main >/dev/null
fi
if ! pg_lsclusters -h | awk '$1=="'"$tt_pg_version"'" && $2=="main" {print $4}' | grep -q online; then
    pg_ctlcluster "$tt_pg_version" main start
fi
tt_pg_port=$(pg_lsclusters -h | awk '$1=="'"$tt_pg_version"'" && $2=="main" {print $3}')
for _ in $(seq 1 30); do
    runuser -u postgres -- pg_isready -q -h 127.0.0.1 -p "$tt_pg_port" && break
    sleep 1
done
runuser -u postgres -- psql -q -p "$tt_pg_port" -v ON_ERROR_STOP=1 -d postgres >/dev/null <<SQL
SELECT 'CREATE ROLE $tt_pg_user LOGIN PASSWORD ''$tt_pg_password'''
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$tt_pg_user')\gexec
SELECT 'CREATE DATABASE $tt_pg_db OWNER $tt_pg_user'
WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = '$tt_pg_db')\gexec
SQL
export TENSORTUNE_TEST_POSTGRES_URL="postgresql://$tt_pg_user:$tt_pg_password@127.0.0.1:$tt_pg_port/$tt_pg_db"
unset tt_pg_user tt_pg_password tt_pg_db tt_pg_version tt_pg_port
