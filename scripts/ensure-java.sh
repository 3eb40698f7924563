# Sourced by scripts/test.sh and scripts/pipeline.sh: makes sure Java 17 or newer is there
# for PySpark 4, installing openjdk-17-jre-headless with apt-get when we are root and it is
# missing; exits with a message otherwise.
java_major() {  # "17.0.15" -> 17, "1.8.0_402" -> 8, anything odd -> 0
    local major
    major=$(java -version 2>&1 | awk -F'"' '/version/ {
        split($2, v, "."); print (v[1] == "1" ? v[2] : v[1]); exit }')
    case "$major" in '' | *[!0-9]*) major=0 ;; esac
    echo "$major"
}
if ! command -v java >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "== java: installing openjdk-17-jre-headless (for PySpark)"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            openjdk-17-jre-headless
    else
        echo "error: java (17 or newer) is required for PySpark; install a JRE" \
            "(for example: apt-get install openjdk-17-jre-headless)" >&2
        exit 1
    fi
fi
if [ "$(java_major)" -lt 17 ]; then
    echo "error: PySpark needs java 17 or newer; found: $(java -version 2>&1 | head -n 1)" >&2
    exit 1
fi
