package collectives

// BcastSplits exposes bcastSplits to the external tests.
var BcastSplits = bcastSplits
