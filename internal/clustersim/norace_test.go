//go:build !race

package clustersim

const raceEnabled = false
