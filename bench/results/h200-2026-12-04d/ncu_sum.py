# Summarises an ncu --csv --page raw log (one row per kernel, gpu__time_duration.sum in ns):
# kernels per step and GPU microseconds per step by kernel name, for `steps` decode steps.
import csv, sys, collections
path, steps, label = sys.argv[1], int(sys.argv[2]), sys.argv[3]
tail = int(sys.argv[4]) if len(sys.argv) > 4 else 0  # only the last `tail` kernels (the decode steps);
# -1: from the last embedding lookup (get_rows_kernel, a decode step's first kernel) to the end
rows = []
with open(path, newline='') as f:
    lines = [l for l in f if l.startswith('"')]
hdr = None
for r in csv.reader(lines):
    if hdr is None:
        if 'Kernel Name' in r: hdr = r
        continue
    if len(r) != len(hdr): continue
    d = dict(zip(hdr, r))
    try: ns = float(d['gpu__time_duration.sum'].replace(',', ''))
    except ValueError: continue
    rows.append((d['Kernel Name'], ns))
if tail == -1:
    starts = [i for i, (n, _) in enumerate(rows) if n.split('(')[0].find('get_rows_kernel') >= 0]
    rows = rows[starts[-1]:] if starts else rows
else:
    rows = rows[-tail:] if tail else rows
tot = collections.defaultdict(float); cnt = collections.Counter()
for n, ns in rows:
    k = n.split('(')[0][:90]; tot[k] += ns; cnt[k] += 1
print(f"MEASURED (ncu, --clock-control none) {label}: {len(rows)} kernels, {sum(tot.values())/1e3/steps:.1f} us of kernel time per step over {steps} steps")
for k, ns in sorted(tot.items(), key=lambda x: -x[1])[:28]:
    print(f"  {ns/1e3/steps:8.1f} us/step {cnt[k]/steps:7.1f} launches/step {ns/cnt[k]/1e3:7.2f} us each  {k}")
