package grid

// PlainPageSQL is the plain keyset read, for the benchmark's bare reference
// handler to run the very same SELECT.
const PlainPageSQL = plainPageSQL
