#!/usr/bin/env bash
# scripts/gpu_tests.sh against a stand-in for a GoogleTest binary: one shard passes a case and
# fails one, the other outlives the time limit; the summary must count each, name the failure,
# and leave the unreached case in rest.filter; bad usage must exit 2.
set -u
SCRIPT=$1
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
cat >"$DIR/fake" <<'FAKE'
#!/usr/bin/env bash
case "$*" in *--gtest_list_tests*) printf 'Suite.\n  passes  # GetParam() = 1\n  hangs\n  fails\n'; exit 0 ;; esac
if [ "$GTEST_SHARD_INDEX" = 0 ]; then
  echo "[       OK ] Suite.passes (1 ms)"
  echo "[  FAILED  ] Suite.fails (2 ms)"
else
  sleep 30
fi
FAKE
chmod +x "$DIR/fake"
fail() { echo "FAIL: $*"; cat "$DIR/out/summary.txt" 2>/dev/null; exit 1; }

"$SCRIPT" "$DIR/fake" "$DIR/out" 2 1 >/dev/null
rc=$?
[ "$rc" = 1 ] || fail "exit status $rc, expected 1 (a failure)"
grep -q "^selected 3, passed 1, failed 1, skipped 0, not reached 1$" "$DIR/out/summary.txt" ||
  fail "the counts"
grep -q "^FAILED Suite.fails$" "$DIR/out/summary.txt" || fail "the failed case's name"
[ "$(cat "$DIR/out/rest.filter")" = "Suite.hangs" ] || fail "rest.filter: $(cat "$DIR/out/rest.filter")"

"$SCRIPT" "$DIR/missing" "$DIR/out2" >/dev/null 2>&1
[ $? = 2 ] || fail "a missing binary must exit 2"
"$SCRIPT" "$DIR/fake" "$DIR/out3" 0 >/dev/null 2>&1
[ $? = 2 ] || fail "0 shards must exit 2"
echo "gpu_tests.sh: ok"
