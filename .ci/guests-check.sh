#!/usr/bin/env bash
# Holds pfnlab's model against Linux 6.1 itself. Boots Debian 12's own
# kernel on each LAYOUT with .ci/guests.sh (default: fake NUMA with 64
# nodes, memmap= holes, movablecore=, more CPUs than nodes, a memory
# block offline), then, from
# each guest's saved files and a `pfnlab snapshot --root` of them:
#
# - `zoneinfo --era 6.1 --compare`, with the snapshot's layout, sysctls,
#   CPUs, kernel command line and kernel log, sized from the guest's own
#   managed pages less those its log says it freed after sizing its zones,
#   names no difference but live state: no zone missing on either side,
#   no `start_pfn`, `spanned` or `present`, and no computed field
#   (watermarks, `protection`, each CPU's `batch` and, before 6.7,
#   `high`) that differs (docs/kernel-views.md);
# - `pagetypeinfo --start-state` prints the guest's pagetypeinfo (placed
#   from the first of four seeds whose placement fits);
# - `buddyinfo --start-state` prints the guest's buddyinfo, where the
#   guest's two files show one state (its /init reads them until they
#   agree, up to 128 times, and says when they never did).
#
# Linux 6.1 can leave free blocks on the lists of a migratetype other
# than their pageblock's (the rest of a block split for a request of
# another migratetype); when the guest's counts prove it, pfnlab refuses
# the start state, and that view is listed as not compared, not failed.
#
#   .ci/guests-check.sh PFNLAB [LAYOUT...]
#
# A guest that does not boot or save its files fails the run at once
# (.ci/guests.sh says which); a guest whose files differ from the model's
# fails it non-zero, naming each guest and view, after every guest has
# been checked.
set -euo pipefail
cd "$(dirname "$0")/.."

[ $# -ge 1 ] || { echo "usage: $0 PFNLAB [LAYOUT...]" >&2; exit 2; }
pfnlab=$(realpath "$1")
shift
layouts=("$@")
[ ${#layouts[@]} -gt 0 ] || layouts=(numa-fake-64 memmap-holes movablecore-1g four-cpus-two-nodes offline-block)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bash .ci/guests.sh "$work/guests" "${layouts[@]}" | tee "$work/boot.log"

# The file without blank lines, each line's runs of blanks as one space.
words() {
  sed -e 's/[[:space:]]\+/ /g' -e 's/ $//' "$1" | grep -v '^$' || true
}

failed=() skipped=()
for layout in "${layouts[@]}"; do
  root="$work/guests/$layout"
  snap="$work/$layout.json"
  before=${#failed[@]} compared=()
  if ! "$pfnlab" snapshot --root "$root" --out "$snap" >/dev/null 2>"$work/err"; then
    echo "$layout: pfnlab snapshot failed: $(cat "$work/err")" >&2
    failed+=("$layout snapshot")
    continue
  fi
  spec="snapshot:$snap"
  inputs=(--layout "$spec" --sysctls "$spec")
  if ! "$pfnlab" zoneinfo --era 6.1 "${inputs[@]}" --managed-from "$root/proc/zoneinfo" \
    --compare "$root/proc/zoneinfo" >"$work/$layout.zoneinfo" 2>"$work/err"; then
    echo "$layout: pfnlab zoneinfo failed: $(cat "$work/err")" >&2
    failed+=("$layout zoneinfo")
    continue
  fi
  diffs=$(grep -v -E "\(live state\)$| fields differ$" "$work/$layout.zoneinfo" || true)
  if [ -n "$diffs" ]; then
    echo "$layout: zoneinfo differs from the guest's beyond its live state:" >&2
    echo "$diffs" | head -20 >&2
    failed+=("$layout zoneinfo")
  fi
  views=(pagetypeinfo)
  if grep -q "^$layout: buddyinfo and pagetypeinfo agree" "$work/boot.log"; then
    views+=(buddyinfo)
  else
    echo "$layout: the guest's buddyinfo and pagetypeinfo never agreed; buddyinfo not compared"
  fi
  for view in "${views[@]}"; do
    # The start state places the guest's free blocks from a seed (the
    # kernel does not say where they were); a placement that leaves a
    # block without room is tried with the next seed, up to four.
    ok=0
    for seed in 0 1 2 3; do
      if "$pfnlab" "$view" --era 6.1 "${inputs[@]}" --start-state "$spec" --seed "$seed" \
        >"$work/$layout.$view" 2>"$work/err"; then
        ok=1
        break
      fi
      grep -q "fit the layout" "$work/err" || break
      echo "$layout: seed $seed placed no start state ($(cat "$work/err")); trying the next"
    done
    # Linux 6.1 can leave free blocks on the lists of a migratetype other
    # than their pageblock's, which the model does not represent; pfnlab
    # says so when the counts prove it, and the view cannot be compared.
    if [ "$ok" -eq 0 ] && grep -q "some lie in pageblocks of another migratetype" "$work/err"; then
      echo "$layout: $view not compared: $(cat "$work/err")"
      skipped+=("$layout $view")
      continue
    fi
    if [ "$ok" -eq 0 ]; then
      echo "$layout: pfnlab $view failed: $(cat "$work/err")" >&2
      failed+=("$layout $view")
    elif ! diff <(words "$work/$layout.$view") <(words "$root/proc/$view") >"$work/$layout.$view.diff"; then
      echo "$layout: $view from the start state differs from the guest's:" >&2
      head -20 "$work/$layout.$view.diff" >&2
      failed+=("$layout $view")
    else
      compared+=("$view")
    fi
  done
  if [ ${#failed[@]} -eq "$before" ]; then
    if [ ${#compared[@]} -eq 0 ]; then
      echo "$layout: the zones and their computed fields are the guest kernel's"
    else
      joined=$(printf '%s and ' "${compared[@]}")
      echo "$layout: the zones, their computed fields and its ${joined% and } are the guest kernel's"
    fi
  fi
done

if [ ${#skipped[@]} -gt 0 ]; then
  echo "not compared (free blocks outside their migratetype's pageblocks): ${skipped[*]}"
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "differs from Linux 6.1: ${failed[*]}" >&2
  exit 1
fi
echo "every guest's zones, computed fields and compared free lists are the model's"
