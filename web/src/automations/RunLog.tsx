import type { Api, Automation, AutomationRun } from "../api";
import { canReplay, latencyText, timeText } from "./runs";
import { useRuns } from "./useRuns";

/** An automation's runs: status, attempts, latency, last error, deliveries; dead runs can be replayed. */
export function RunLog({ api, tableId, automation, canEdit }: { api: Api; tableId: string; automation: Automation; canEdit: boolean }) {
  const { list, error, notice, refresh, more, replay } = useRuns(api, tableId, automation.id);
  return (
    <div className="run-log">
      <div className="auto-line">
        <span className="muted small">Refreshes every few seconds while open.</span>
        <span className="spacer" />
        <button className="btn small" onClick={() => void refresh()}>
          Refresh
        </button>
      </div>
      {error && (
        <p className="error" role="alert">
          The run log could not be loaded: {error}
        </p>
      )}
      {notice && (
        <p className="auto-notice" role="status">
          {notice}
        </p>
      )}
      {list === null && !error && <p className="muted">Loading runs…</p>}
      {list?.runs.length === 0 && <p className="muted">No runs yet. A change that matches the trigger and condition starts one.</p>}
      {list && list.runs.length > 0 && (
        <table className="runs">
          <caption className="sr-only">Runs of {automation.name}, newest first</caption>
          <thead>
            <tr>
              <th scope="col">Queued</th>
              <th scope="col">Event</th>
              <th scope="col">Status</th>
              <th scope="col">Attempts</th>
              <th scope="col">Latency</th>
              <th scope="col">Deliveries and last error</th>
              {canEdit && <th scope="col"><span className="sr-only">Replay</span></th>}
            </tr>
          </thead>
          <tbody>
            {list.runs.map((r) => (
              <RunRow key={r.id} run={r} canEdit={canEdit} onReplay={() => void replay(r)} />
            ))}
          </tbody>
        </table>
      )}
      {list?.cursor && (
        <button className="btn small" onClick={() => void more()}>
          Load older runs
        </button>
      )}
    </div>
  );
}

function RunRow({ run: r, canEdit, onReplay }: { run: AutomationRun; canEdit: boolean; onReplay: () => void }) {
  return (
    <tr>
      <td className="nowrap">{timeText(r.queued_at)}</td>
      <td>
        {r.event}
        <span className="muted small">
          {" "}
          · {r.row_ids.length} row{r.row_ids.length === 1 ? "" : "s"}
          {r.hop > 0 ? ` · hop ${r.hop}` : ""}
        </span>
      </td>
      <td>
        <span className={"run-status " + r.status}>{r.status}</span>
      </td>
      <td>{r.attempts}</td>
      <td className="nowrap">{latencyText(r.latency_ms)}</td>
      <td>
        {r.deliveries.length > 0 && (
          <ul className="deliveries">
            {r.deliveries.map((d) => (
              <li key={d.id}>
                <span className={"delivery-state " + d.state}>{d.state}</span> {d.url}
                <span className="muted small">
                  {" "}
                  · {d.attempts} attempt{d.attempts === 1 ? "" : "s"}
                  {d.last_status !== null ? ` · HTTP ${d.last_status}` : ""}
                  {d.state === "pending" && d.next_attempt_at ? ` · next ${timeText(d.next_attempt_at)}` : ""}
                </span>
              </li>
            ))}
          </ul>
        )}
        {r.last_error && <p className="run-error">{r.last_error}</p>}
      </td>
      {canEdit && (
        <td>
          {(r.status === "dead" || r.status === "failed") && canReplay(r) && (
            <button className="btn small" onClick={onReplay} aria-label={`Replay the run of ${timeText(r.queued_at)}`}>
              Replay
            </button>
          )}
        </td>
      )}
    </tr>
  );
}
