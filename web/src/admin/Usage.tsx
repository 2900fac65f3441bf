import { useCallback, useMemo } from "react";
import type { Api, RealmUsage } from "../api";
import { Chart } from "./Chart";
import { reasonLabel } from "./format";
import { usageSeries } from "./model";
import { useResource } from "./useResource";
import { ErrorLine } from "../ErrorLine";

export function UsageCharts({ usage, width }: { usage: RealmUsage; width?: number }) {
  const s = useMemo(() => usageSeries(usage), [usage]);
  return (
    <div className="charts">
      <Chart title="Requests and refusals per minute" x={s.x} series={s.requests} width={width} />
      <Chart title="Latency, p95 (ms)" x={s.x} series={s.latency} width={width} />
      <Chart title="Seats in use and queue waits" x={s.x} series={s.seats} width={width} />
    </div>
  );
}

export function Totals({ usage }: { usage: RealmUsage }) {
  const reasons: Record<string, number> = {};
  for (const m of usage.minutes) for (const [r, n] of Object.entries(m.refused)) reasons[r] = (reasons[r] ?? 0) + n;
  return (
    <p className="totals">
      <span>
        <strong data-requests>{usage.requests_last_hour}</strong> requests
      </span>
      <span>
        <strong data-refused>{usage.refused_last_hour}</strong> refused
        {Object.keys(reasons).length > 0 &&
          " (" +
            Object.entries(reasons)
              .map(([r, n]) => `${n} ${reasonLabel[r] ?? r}`)
              .join(", ") +
            ")"}
      </span>
      <span className="muted">in the last hour, all replicas</span>
    </p>
  );
}

export function UsagePage({ api }: { api: Api }) {
  const fetch = useCallback(() => api.usage().then((r) => r.realm), [api]);
  const { value, error, reload } = useResource(fetch, 10_000);
  return (
    <section aria-labelledby="usage-h">
      <div className="page-head">
        <h2 id="usage-h">Usage, the last hour</h2>
        <button className="btn small" onClick={() => void reload()}>
          Refresh
        </button>
      </div>
      <ErrorLine text={error} />
      {!value && !error && <p className="muted">Loading…</p>}
      {value && (
        <>
          <Totals usage={value} />
          <UsageCharts usage={value} />
        </>
      )}
    </section>
  );
}

/** Every realm side by side, for operators: names and numbers only. */
export function OperatorPage({ api }: { api: Api }) {
  const fetch = useCallback(() => api.operatorUsage().then((r) => r.realms), [api]);
  const { value, error } = useResource(fetch, 10_000);
  return (
    <section aria-labelledby="operator-h">
      <h2 id="operator-h">All realms</h2>
      <p className="muted">Every realm's usage in the last hour, busiest first. As an operator you see how each realm uses this Appdor, never its rows.</p>
      <ErrorLine text={error} />
      {!value && !error && <p className="muted">Loading…</p>}
      <div className="realm-usage">
        {value?.map((r) => (
          <article className="card realm-card" key={r.id} data-realm={r.name}>
            <h3>{r.name}</h3>
            {r.minutes.length === 0 ? (
              <p className="muted">No requests in the last hour.</p>
            ) : (
              <>
                <Totals usage={r} />
                <UsageCharts usage={r} width={300} />
              </>
            )}
          </article>
        ))}
      </div>
    </section>
  );
}
