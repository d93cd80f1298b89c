/**
 * Types of `parse-prometheus-text-format` (which ships none), as far as sluice reads it: the
 * families of a Prometheus text exposition, in order, each sample's value as the text it had
 * (`"3.0"`, `"NaN"`, `"+Inf"`). A line that is not valid Prometheus text throws.
 */
declare module 'parse-prometheus-text-format' {
  export interface PrometheusSample {
    /** Absent on the summaries and histograms the parser folds (their buckets, sum and count). */
    value?: string;
    labels?: Record<string, string>;
    timestamp_ms?: string;
  }

  export interface PrometheusFamily {
    name: string;
    help: string;
    /** `COUNTER`, `GAUGE`, `SUMMARY`, `HISTOGRAM` or `UNTYPED`. */
    type: string;
    metrics: PrometheusSample[];
  }

  function parsePrometheusTextFormat(text: string): PrometheusFamily[];
  export = parsePrometheusTextFormat;
}
