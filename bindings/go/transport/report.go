package transport

// Beyond the seed: why a preference gets the transport it gets, and what
// the plugin scan found, so that a Go zap-info is a few lines (see
// cmd/zap-info-go).

// Choice is what Pick would do for a preference, and why.
type Choice struct {
	Name     string // the transport Pick would open
	Fallback bool   // Name is not what the preference asked for
	Reason   string // one line, e.g. why the requested one is unavailable
}

// Explain decides like Pick without opening anything and without Pick's
// first-call log line. On error (an error matching ErrNotAvailable for a
// strict "=name" that is unavailable, or a malformed preference) the
// Choice still carries the reason.
func Explain(preference string) (Choice, error) { return explainC(preference) }

// PluginDir is one plugin directory libzap searched, in search order.
type PluginDir struct {
	Path   string
	Source string // "ZAP_PLUGIN_PATH" or "built-in"
	Status string // "ok", "missing", or "refused: <why>"
}

// PluginReport is one candidate transport of the load report.
type PluginReport struct {
	Name    string
	Path    string // the file, or "(built-in)"
	State   string // "loaded", "not present", "error", "no symbol", "ABI mismatch", "refused", "shadowed", "dlopen failed"
	Reason  string // one line; "" when loaded
	Detail  string // multi-line probe detail, or ""
	Version string
	Rank    int // higher is preferred
	Builtin bool
	Caps    Capabilities // from the probe; zero unless loaded
}

// Report is libzap's load report: the directories searched and one row
// per candidate, whatever became of it.
type Report struct {
	Dirs    []PluginDir
	Plugins []PluginReport
}

// LoadReport returns the load report, scanning the plugin directories
// first if no pick has yet.
func LoadReport() (Report, error) { return loadReportC() }

// Version returns libzap's version string, e.g. "0.1.0".
func Version() string { return versionC() }
