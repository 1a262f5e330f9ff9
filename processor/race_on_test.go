//go:build race

package processor

// raceDetector: the tests run under the race detector (make test's second
// run).
const raceDetector = true
