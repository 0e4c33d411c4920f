// Package traces defines watchspec's recorded-trace format and holds the
// corpus of traces, including regressions of real upstream bugs.
//
// The format and corpus arrive with issue 4 ("History checking"); until then
// this package is empty.
package traces
