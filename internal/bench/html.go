package bench

import (
	"bytes"
	"fmt"
	"html/template"
	"io"
	"math"
	"slices"
	"strings"
)

// WriteHTML writes a self-contained report: no script, no external
// resource; the charts are inline SVG.
func (rep *Report) WriteHTML(w io.Writer) error {
	var sum bytes.Buffer
	rep.WriteSummary(&sum)
	data := struct {
		R       *Report
		Summary string
		Charts  []template.HTML
	}{R: rep, Summary: sum.String(), Charts: rep.charts()}
	return htmlPage.Execute(w, data)
}

func (rep *Report) charts() []template.HTML {
	var out []template.HTML
	tl := rep.Timeline
	xs := make([]float64, len(tl))
	for i, p := range tl {
		xs[i] = p.T
	}
	col := func(f func(Point) float64, skipEmpty bool) []float64 {
		ys := make([]float64, len(tl))
		for i, p := range tl {
			ys[i] = f(p)
			if skipEmpty && p.Samples == 0 {
				ys[i] = math.NaN()
			}
		}
		return ys
	}
	if rep.Latency != nil && rep.Latency.Count > 0 {
		out = append(out, lineChart("End-to-end latency per second (ms, log scale)", xs, []series{
			{"p50", "#2b7bb9", col(func(p Point) float64 { return p.P50MS }, true)},
			{"p95", "#39a845", col(func(p Point) float64 { return p.P95MS }, true)},
			{"p99", "#e08a1e", col(func(p Point) float64 { return p.P99MS }, true)},
			{"max", "#c8322d", col(func(p Point) float64 { return p.MaxMS }, true)},
		}, true))
		l := rep.Latency
		out = append(out, barChart("End-to-end latency histogram (ms, log bins)", rebin(l.Histogram, 10), []marker{
			{"p50", l.P50MS, "#2b7bb9"}, {"p99", l.P99MS, "#e08a1e"}, {"max", l.MaxMS, "#c8322d"},
		}))
		sent := col(func(p Point) float64 { return float64(p.Sent) }, false)
		recv := col(func(p Point) float64 { return float64(p.Received) }, false)
		// Broadcasts fan out: received is sent times the connections, so
		// both only show on a log scale.
		logY := slices.Max(recv) > 50*max(slices.Max(sent), 1)
		title := "Messages per second"
		if logY {
			title += " (log scale)"
		}
		out = append(out, lineChart(title, xs, []series{
			{"sent (API)", "#7a4fb5", sent},
			{"received (distinct)", "#2b7bb9", recv},
		}, logY))
	}
	out = append(out, lineChart("Connections", xs, []series{
		{"open", "#2b7bb9", col(func(p Point) float64 { return float64(p.Open) }, false)},
		{"connects/s", "#39a845", col(func(p Point) float64 { return float64(p.Connects) }, false)},
		{"failed dials/s", "#c8322d", col(func(p Point) float64 { return float64(p.DialFails) }, false)},
	}, false))
	if ct := rep.Connections.ConnectTime; ct.Count > 0 {
		out = append(out, barChart("Connect time histogram (ms, log bins)", rebin(ct.Histogram, 10), []marker{
			{"p50", ct.P50MS, "#2b7bb9"}, {"p99", ct.P99MS, "#e08a1e"},
		}))
	}
	out = append(out, rep.soakCharts()...)
	return out
}

// rebin regroups fine buckets into perDecade logarithmic bins, from the
// first non-empty one to the last.
func rebin(bs []Bucket, perDecade int) []Bucket {
	if len(bs) == 0 {
		return nil
	}
	key := func(b Bucket) int {
		mid := max((b.LowMS+b.HighMS)/2, 1e-6)
		return int(math.Floor(math.Log10(mid) * float64(perDecade)))
	}
	first, last := key(bs[0]), key(bs[len(bs)-1])
	out := make([]Bucket, last-first+1)
	for k := range out {
		out[k].LowMS = math.Pow(10, float64(first+k)/float64(perDecade))
		out[k].HighMS = math.Pow(10, float64(first+k+1)/float64(perDecade))
	}
	for _, b := range bs {
		out[key(b)-first].Count += b.Count
	}
	return out
}

type series struct {
	name, color string
	ys          []float64 // NaN: no value
}

type marker struct {
	name  string
	value float64
	color string
}

const (
	chartW, chartH             = 920, 260
	padL, padR, padT, padB     = 64, 16, 34, 36
	plotW, plotH               = chartW - padL - padR, chartH - padT - padB
	axisColor, gridColor, font = "#555", "#e3e3e3", `font-family="system-ui,sans-serif" font-size="11"`
)

// lineChart draws series over xs; logY uses a base-10 logarithmic axis.
func lineChart(title string, xs []float64, ss []series, logY bool) template.HTML {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="100%%" role="img"><title>%s</title>`, chartW, chartH, template.HTMLEscapeString(title))
	fmt.Fprintf(&b, `<text x="%d" y="18" %s font-size="13" font-weight="600">%s</text>`, padL, font, template.HTMLEscapeString(title))
	xmax := 1.0
	if len(xs) > 0 {
		xmax = max(xs[len(xs)-1], 1)
	}
	ymin, ymax := math.Inf(1), math.Inf(-1)
	for _, s := range ss {
		for _, y := range s.ys {
			if math.IsNaN(y) || (logY && y <= 0) {
				continue
			}
			ymin, ymax = min(ymin, y), max(ymax, y)
		}
	}
	if math.IsInf(ymax, -1) {
		fmt.Fprintf(&b, `<text x="%d" y="%d" %s fill="%s">no data</text></svg>`, padL, padT+plotH/2, font, axisColor)
		return template.HTML(b.String())
	}
	var ypos func(float64) float64
	var ticks []float64
	if logY {
		lo, hi := math.Floor(math.Log10(ymin)), math.Ceil(math.Log10(ymax))
		if hi == lo {
			hi++
		}
		ypos = func(y float64) float64 { return padT + plotH - (math.Log10(y)-lo)/(hi-lo)*plotH }
		for e := lo; e <= hi; e++ {
			for _, m := range []float64{1, 2, 5} {
				if v := m * math.Pow(10, e); math.Log10(v) <= hi+1e-9 {
					ticks = append(ticks, v)
				}
			}
		}
	} else {
		top := niceCeil(ymax)
		ypos = func(y float64) float64 { return padT + plotH - y/top*plotH }
		for i := 0; i <= 4; i++ {
			ticks = append(ticks, top*float64(i)/4)
		}
	}
	xpos := func(x float64) float64 { return padL + x/xmax*plotW }
	for _, t := range ticks {
		y := ypos(t)
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="%s"/>`, padL, padL+plotW, y, y, gridColor)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" %s text-anchor="end" fill="%s">%s</text>`, padL-6, y+4, font, axisColor, fmtNum(t))
	}
	xstep := niceCeil(xmax / 8)
	for x := 0.0; x <= xmax+1e-9; x += xstep {
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" %s text-anchor="middle" fill="%s">%ss</text>`, xpos(x), padT+plotH+16, font, axisColor, fmtNum(x))
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="%s"/>`, padL, padT, plotW, plotH, axisColor)
	for _, s := range ss {
		var path strings.Builder
		pen := false
		for i, y := range s.ys {
			if math.IsNaN(y) || (logY && y <= 0) {
				pen = false
				continue
			}
			cmd := "L"
			if !pen {
				cmd = "M"
			}
			fmt.Fprintf(&path, "%s%.1f %.1f ", cmd, xpos(xs[i]), ypos(y))
			pen = true
		}
		fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.6"/>`, strings.TrimSpace(path.String()), s.color)
	}
	lx := padL + plotW - 130*len(ss)
	for i, s := range ss {
		x := lx + 130*i
		fmt.Fprintf(&b, `<rect x="%d" y="8" width="12" height="4" fill="%s"/><text x="%d" y="14" %s>%s</text>`, x, s.color, x+16, font, template.HTMLEscapeString(s.name))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// barChart draws a histogram of log bins with vertical markers.
func barChart(title string, bins []Bucket, marks []marker) template.HTML {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="100%%" role="img"><title>%s</title>`, chartW, chartH, template.HTMLEscapeString(title))
	fmt.Fprintf(&b, `<text x="%d" y="18" %s font-size="13" font-weight="600">%s</text>`, padL, font, template.HTMLEscapeString(title))
	if len(bins) == 0 {
		b.WriteString(`</svg>`)
		return template.HTML(b.String())
	}
	var top uint64
	for _, bin := range bins {
		top = max(top, bin.Count)
	}
	ytop := niceCeil(float64(top))
	bw := float64(plotW) / float64(len(bins))
	for i := 0; i <= 4; i++ {
		v := ytop * float64(i) / 4
		y := padT + plotH - v/ytop*plotH
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="%s"/>`, padL, padL+plotW, y, y, gridColor)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" %s text-anchor="end" fill="%s">%s</text>`, padL-6, y+4, font, axisColor, fmtNum(v))
	}
	for i, bin := range bins {
		h := float64(bin.Count) / ytop * plotH
		x := padL + float64(i)*bw
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#2b7bb9" opacity="0.8"><title>%s–%s ms: %d</title></rect>`,
			x+0.5, padT+plotH-h, max(bw-1, 0.5), h, fmtNum(bin.LowMS), fmtNum(bin.HighMS), bin.Count)
		// Label the edges that are 1, 2 or 5 times a power of ten.
		if lbl, ok := roundEdge(bin.LowMS); ok {
			fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="%s"/>`, x, x, padT+plotH, padT+plotH+4, axisColor)
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" %s text-anchor="middle" fill="%s">%s</text>`, x, padT+plotH+16, font, axisColor, lbl)
		}
	}
	for i, m := range marks {
		if m.value <= 0 {
			continue
		}
		lo, hi := bins[0].LowMS, bins[len(bins)-1].HighMS
		f := (math.Log10(m.value) - math.Log10(lo)) / (math.Log10(hi) - math.Log10(lo))
		x := padL + min(max(f, 0), 1)*plotW
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="%s" stroke-dasharray="4 3"/>`, x, x, padT, padT+plotH, m.color)
		tx, anchor := x+3, "start"
		if x > padL+plotW-110 {
			tx, anchor = x-3, "end"
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" %s text-anchor="%s" fill="%s">%s %s</text>`, tx, padT+12+14*i, font, anchor, m.color, template.HTMLEscapeString(m.name), fmtMS(m.value))
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="%s"/>`, padL, padT, plotW, plotH, axisColor)
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// roundEdge reports whether a log-bin edge (10 bins per decade) is 1, 2
// or 5 times a power of ten, and its label.
func roundEdge(v float64) (string, bool) {
	if v <= 0 {
		return "", false
	}
	k := int(math.Round(math.Log10(v) * 10))
	switch ((k % 10) + 10) % 10 {
	case 0, 3, 7:
		r := math.Pow(10, math.Floor(float64(k)/10))
		m := math.Round(v / r)
		return fmtNum(m * r), true
	}
	return "", false
}

// niceCeil rounds v up to 1, 2, 2.5 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func fmtNum(v float64) string {
	switch {
	case v == 0:
		return "0"
	case math.Abs(v) >= 1e6:
		return fmt.Sprintf("%.3gM", v/1e6)
	case math.Abs(v) >= 1e4:
		return fmt.Sprintf("%.3gk", v/1e3)
	case math.Abs(v) >= 1:
		return fmt.Sprintf("%.4g", v)
	}
	return fmt.Sprintf("%.3g", v)
}

var htmlPage = template.Must(template.New("report").Funcs(template.FuncMap{
	"ms":    fmtMS,
	"bytes": fmtBytes,
	"secs":  fmtSeconds,
	"num":   func(v float64) string { return fmtNum(v) },
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width,initial-scale=1">
<title>wsgate bench {{.R.Scenario}} {{.R.RunID}}</title>
<style>
body{font-family:system-ui,sans-serif;margin:24px auto;max-width:980px;color:#222;padding:0 12px}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:28px 0 8px}
.sub{color:#666;margin-bottom:16px}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(170px,1fr));gap:10px}
.card{border:1px solid #ddd;border-radius:6px;padding:10px}
.card b{display:block;font-size:18px;margin-top:4px}
.card span{color:#666;font-size:12px}
table{border-collapse:collapse;width:100%;font-size:13px}
td,th{border-bottom:1px solid #eee;padding:4px 8px;text-align:right}
td:first-child,th:first-child{text-align:left}
.ok{color:#277a32}.fail{color:#b3261e;font-weight:600}
svg{display:block;margin:10px 0;border:1px solid #eee;border-radius:4px}
pre{font-size:12px;background:#f7f7f7;padding:10px;overflow:auto}
</style></head><body>
<h1>wsgate bench {{.R.Scenario}}</h1>
<div class="sub">run {{.R.RunID}} · {{.R.Started.Format "2006-01-02 15:04:05 MST"}} · {{printf "%.1f" .R.ElapsedS}} s · {{.R.Config.Conns}} connections{{if .R.Messages}} · {{.R.Config.Rate}} msg/s{{end}} · {{.R.Config.Format}}{{if .R.Error}} · <span class="fail">error: {{.R.Error}}</span>{{end}}</div>
<div class="cards">
<div class="card"><span>connections</span><b>{{.R.Connections.Succeeded}} / {{.R.Connections.Attempted}}</b><span>reconnects {{.R.Connections.Reconnects}}</span></div>
<div class="card"><span>connect time p50 / p99</span><b>{{ms .R.Connections.ConnectTime.P50MS}} / {{ms .R.Connections.ConnectTime.P99MS}}</b></div>
{{with .R.Latency}}<div class="card"><span>latency p50 / p95</span><b>{{ms .P50MS}} / {{ms .P95MS}}</b><span>p99 {{ms .P99MS}} · max {{ms .MaxMS}}</span></div>{{end}}
{{with .R.Messages}}<div class="card"><span>received / expected</span><b>{{.Received}} / {{.Expected}}</b><span>lost {{.Lost}} · duplicated {{.Duplicated}}</span></div>{{end}}
{{with .R.Derived}}{{if and (eq $.R.Scenario "connect") (gt .RSSPerConnBytes 0.0)}}<div class="card"><span>node RSS per connection</span><b>{{bytes .RSSPerConnBytes}}</b></div>{{end}}
{{if gt .CPUPerConnectS 0.0}}<div class="card"><span>node CPU per connect</span><b>{{secs .CPUPerConnectS}}</b></div>{{end}}
{{if gt .CPUPerDeliveredS 0.0}}<div class="card"><span>node CPU per delivered message</span><b>{{secs .CPUPerDeliveredS}}</b></div>{{end}}{{end}}
{{with .R.Ticker}}<div class="card"><span>ticker: slow readers at the latest value</span><b>{{.SlowAtLatest}} / {{.SlowReaders}}</b><span>received {{.SlowReceived}} of {{.SlowUnconflated}} · out of order {{.Regressions}}</span></div>
<div class="card"><span>ticker: conflated / queue full</span><b>{{printf "%.0f" .Conflated}} / {{printf "%.0f" .QueueFullDrop}}</b><span>fast readers lost {{.FastLost}} of {{.FastExpected}}</span></div>{{end}}
{{with .R.Storm}}<div class="card"><span>full reconnection</span><b>{{printf "%.2f" .FullReconnectS}} s</b><span>{{.Reconnected}} / {{.Dropped}} · peak {{printf "%.0f" .PeakRate}}/s</span></div>{{end}}
</div>
<h2>Charts</h2>
{{range .Charts}}{{.}}{{end}}
<h2>Nodes</h2>
{{range .R.Nodes}}<table><tr><th>{{.URL}}</th><th>baseline</th><th>ready</th><th>end</th><th>final</th></tr>
<tr><td>connections</td><td>{{with .Baseline}}{{num .Connections}}{{end}}</td><td>{{with .Ready}}{{num .Connections}}{{end}}</td><td>{{with .End}}{{num .Connections}}{{end}}</td><td>{{with .Final}}{{num .Connections}}{{end}}</td></tr>
<tr><td>RSS</td><td>{{with .Baseline}}{{bytes .RSSBytes}}{{end}}</td><td>{{with .Ready}}{{bytes .RSSBytes}}{{end}}</td><td>{{with .End}}{{bytes .RSSBytes}}{{end}}</td><td>{{with .Final}}{{bytes .RSSBytes}}{{end}}</td></tr>
<tr><td>heap in use</td><td>{{with .Baseline}}{{bytes .HeapInuseBytes}}{{end}}</td><td>{{with .Ready}}{{bytes .HeapInuseBytes}}{{end}}</td><td>{{with .End}}{{bytes .HeapInuseBytes}}{{end}}</td><td>{{with .Final}}{{bytes .HeapInuseBytes}}{{end}}</td></tr>
<tr><td>goroutines</td><td>{{with .Baseline}}{{num .Goroutines}}{{end}}</td><td>{{with .Ready}}{{num .Goroutines}}{{end}}</td><td>{{with .End}}{{num .Goroutines}}{{end}}</td><td>{{with .Final}}{{num .Goroutines}}{{end}}</td></tr>
<tr><td>open fds</td><td>{{with .Baseline}}{{num .OpenFDs}}{{end}}</td><td>{{with .Ready}}{{num .OpenFDs}}{{end}}</td><td>{{with .End}}{{num .OpenFDs}}{{end}}</td><td>{{with .Final}}{{num .OpenFDs}}{{end}}</td></tr>
<tr><td>CPU seconds</td><td>{{with .Baseline}}{{printf "%.2f" .CPUSeconds}}{{end}}</td><td>{{with .Ready}}{{printf "%.2f" .CPUSeconds}}{{end}}</td><td>{{with .End}}{{printf "%.2f" .CPUSeconds}}{{end}}</td><td>{{with .Final}}{{printf "%.2f" .CPUSeconds}}{{end}}</td></tr>
<tr><td>GC cycles</td><td>{{with .Baseline}}{{num .GCCycles}}{{end}}</td><td>{{with .Ready}}{{num .GCCycles}}{{end}}</td><td>{{with .End}}{{num .GCCycles}}{{end}}</td><td>{{with .Final}}{{num .GCCycles}}{{end}}</td></tr>
<tr><td>GC pause max</td><td>{{with .Baseline}}{{secs .GCPauseMax}}{{end}}</td><td>{{with .Ready}}{{secs .GCPauseMax}}{{end}}</td><td>{{with .End}}{{secs .GCPauseMax}}{{end}}</td><td>{{with .Final}}{{secs .GCPauseMax}}{{end}}</td></tr>
</table>{{end}}
<h2>Checks</h2>
<table>{{range .R.Checks}}<tr><td>{{.Name}}</td><td class="{{if .OK}}ok{{else}}fail{{end}}">{{if .OK}}ok{{else}}FAIL{{end}}</td><td style="text-align:left">{{.Detail}}</td></tr>{{end}}</table>
<h2>Summary</h2>
<pre>{{.Summary}}</pre>
<p class="sub">Every figure is in the --json report; docs/bench.md explains each one.</p>
</body></html>
`))
