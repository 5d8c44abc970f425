# Reads go test's output and prints each failed testify assertion on one
# line (where, the error's first line, its message) and each failed test's
# "--- FAIL" line: a summary to end CI's output with.
function flush() {
	if (err != "") print substr(at ": " err (msg != "" ? " | " msg : ""), 1, 300)
	at = ""; err = ""; msg = ""
}
/^[[:space:]]+[[:alnum:]_]+\.go:[0-9]+: *$/ { flush(); at = $1; sub(/:$/, "", at) }
# An error's first line that ends in ":" (require.NoError's "Received
# unexpected error:") says what follows on the next.
cont { sub(/^[[:space:]]+/, ""); err = err " " $0; cont = 0; next }
/^[[:space:]]+Error:[[:space:]]/ { sub(/^[[:space:]]+Error:[[:space:]]+/, ""); err = $0; cont = /:$/ }
/^[[:space:]]+Messages:[[:space:]]/ { sub(/^[[:space:]]+Messages:[[:space:]]+/, ""); msg = $0 }
/^--- FAIL/ { flush(); print }
END { flush() }
