# summary.awk: one line for a row of an osu-compare table (SIZE, A median,
# B median, median ratio, per-round range LO-HI), for compare.sh's and
# cross-host.sh's summary.txt:
#
#   awk -v name=ROW -v mode=time|bw -f bench/summary.awk TABLE
#
# The line gives the worst and best median ratio, the worst of each size
# band, and the sizes where A was behind in every round (time: the range's
# low end above 1; bw: its high end below 1). On a machine whose single
# rounds swing 2-4x, a median a little past 1 says little on its own; a size
# behind in every one of 7 rounds is behind beyond that noise (by chance
# with probability 1/128 were the two even).
function worse(a, b) { return mode == "bw" ? a < b : a > b }
!/^#/ && $1 ~ /^[0-9]+$/ && NF >= 4 {
	r = $4 + 0
	s = $1
	band = s < 1024 ? 1 : s < 65536 ? 2 : s < 1048576 ? 3 : 4
	if (!(band in worst) || worse(r, worst[band])) worst[band] = r
	if (n == 0 || worse(r, all)) { all = r; at = s; range = $5 }
	if (n == 0 || worse(best, r)) best = r
	n++
	if (split($5, lohi, "-") == 2 && (mode == "bw" ? lohi[2] + 0 < 1 : lohi[1] + 0 > 1))
		behind = behind sprintf(" %s (%.2f, %s)", s, r, $5)
}
END {
	if (n == 0) {
		printf "%-34s no rows\n", name
		exit
	}
	line = sprintf("%-34s worst %.2f at %d (rounds %s), best %.2f |", name, all, at, range, best)
	split("<1K 1K-64K 64K-1M >=1M", label, " ")
	for (i = 1; i <= 4; i++)
		if (i in worst) line = line sprintf(" %s %.2f", label[i], worst[i])
	print line " | behind in every round:" (behind == "" ? " none" : behind)
}
