package report

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"rtgate/bench/stats"
)

// Table is a titled table for the HTML page.
type Table struct {
	Title  string
	Header []string
	Rows   [][]string
}

// Series is one line of a CDF chart: a setup's samples, sorted ascending.
type Series struct {
	Name   string
	Sorted []time.Duration
}

// Chart is one CDF chart (one phase, one line per setup).
//
// The charts are written by hand as inline SVG on purpose: the report must open
// offline, from a results folder or a mail attachment, with no script and
// nothing fetched; Go's charting libraries either render bitmaps or emit
// JavaScript, and a step line per series with labelled axes is a few dozen
// lines here.
type Chart struct {
	Title  string
	Series []Series
}

// Page is the whole HTML report.
type Page struct {
	Title     string
	Generated time.Time
	Notes     []string // paragraphs under the title (setup, definitions)
	Tables    []Table
	Charts    []Chart
}

// palette colours the series in order (colour-blind friendly).
var palette = []string{"#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9"}

// pageTmpl lays out the report; the HTML is a file of its own so it reads as HTML.
//
//go:embed page.html.tmpl
var pageHTML string

var pageTmpl = template.Must(template.New("page").Parse(pageHTML))

// WriteHTML writes the page. It is self-contained: inline CSS and SVG, no
// scripts, no external resources, so it renders offline.
func WriteHTML(w io.Writer, p Page) error {
	svgs := make([]template.HTML, 0, len(p.Charts))
	for _, c := range p.Charts {
		svgs = append(svgs, CDFSVG(c))
	}
	data := struct {
		Page
		SVGs []template.HTML
	}{p, svgs}
	if err := pageTmpl.Execute(w, data); err != nil {
		return fmt.Errorf("render HTML report: %w", err)
	}
	return nil
}

// Chart geometry, in SVG user units.
const (
	chartW, chartH                 = 560, 320
	padL, padR, padT, padB         = 52, 16, 28, 64
	plotW, plotH                   = chartW - padL - padR, chartH - padT - padB
	cdfPoints                      = 400
	minChartMS             float64 = 0.001 // 1 µs: the log axis needs a positive floor
)

// CDFSVG draws the empirical CDFs of a chart's series on a log-scaled
// latency axis (decades of milliseconds), as an inline <svg>.
func CDFSVG(c Chart) template.HTML {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range c.Series {
		if len(s.Sorted) == 0 {
			continue
		}
		lo = math.Min(lo, math.Max(stats.Millis(s.Sorted[0]), minChartMS))
		hi = math.Max(hi, math.Max(stats.Millis(s.Sorted[len(s.Sorted)-1]), minChartMS))
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img">`,
		chartW, chartH, chartW, chartH)
	fmt.Fprintf(&b, `<title>%s</title>`, template.HTMLEscapeString(c.Title))
	fmt.Fprintf(&b, `<text x="%d" y="18" font-size="14" font-weight="bold">%s</text>`, padL, template.HTMLEscapeString(c.Title))
	if math.IsInf(lo, 1) {
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="13">no samples</text></svg>`, padL, padT+plotH/2)
		return template.HTML(b.String())
	}
	d0, d1 := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if d1 <= d0 {
		d1 = d0 + 1
	}
	x := func(ms float64) float64 {
		ms = math.Max(ms, minChartMS)
		return padL + (math.Log10(ms)-d0)/(d1-d0)*plotW
	}
	y := func(f float64) float64 { return padT + (1-f)*plotH }

	// Grid: a labelled line per decade, light lines at 2x and 5x, and
	// every 25% on the y axis.
	for d := d0; d <= d1; d++ {
		v := math.Pow(10, d)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#bbb"/>`, x(v), padT, x(v), padT+plotH)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="11" text-anchor="middle">%s</text>`,
			x(v), padT+plotH+14, strconv.FormatFloat(v, 'g', -1, 64))
		for _, m := range []float64{2, 5} {
			if d < d1 {
				fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#eee"/>`, x(v*m), padT, x(v*m), padT+plotH)
				if d1-d0 <= 2 { // few decades: label the minor lines too
					fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="10" fill="#777" text-anchor="middle">%s</text>`,
						x(v*m), padT+plotH+14, strconv.FormatFloat(v*m, 'g', -1, 64))
				}
			}
		}
	}
	for q := 0; q <= 4; q++ {
		f := float64(q) / 4
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`, padL, y(f), padL+plotW, y(f))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-size="11" text-anchor="end">%d%%</text>`, padL-4, y(f)+4, q*25)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="11" text-anchor="middle">latency (ms)</text>`, padL+plotW/2, padT+plotH+28)

	for i, s := range c.Series {
		color := palette[i%len(palette)]
		pts := stats.CDF(s.Sorted, cdfPoints)
		if len(pts) > 0 {
			// A step line: flat until each sample, then up to its fraction.
			var path strings.Builder
			prev := 0.0
			fmt.Fprintf(&path, "M%.1f,%.1f", x(stats.Millis(pts[0].Value)), y(0))
			for _, p := range pts {
				px := x(stats.Millis(p.Value))
				fmt.Fprintf(&path, " L%.1f,%.1f L%.1f,%.1f", px, y(prev), px, y(p.Fraction))
				prev = p.Fraction
			}
			fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.8"><title>%s</title></path>`,
				path.String(), color, template.HTMLEscapeString(s.Name))
		}
		// Legend below the axis label.
		lx := padL + (i%2)*(plotW/2)
		ly := padT + plotH + 46 + (i/2)*16
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="4" fill="%s"/>`, lx, ly-4, color)
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="11">%s (n=%d)</text>`, lx+16, ly, template.HTMLEscapeString(s.Name), len(s.Sorted))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}
