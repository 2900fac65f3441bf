import { pathLabel, type Errors } from "./model";

/** Every reason the automation was not saved, in the person's words, announced when it appears. */
export function FormErrors({ errors, fieldName }: { errors: Errors; fieldName: (id: string) => string }) {
  const entries = Object.entries(errors);
  if (entries.length === 0) return null;
  const general = errors[""];
  const rest = entries.filter(([k]) => k !== "");
  return (
    <div className="form-errors" role="alert">
      <p>{general ?? "The automation was not saved. Fix what is marked:"}</p>
      {rest.length > 0 && (
        <ul>
          {rest.map(([k, v]) => (
            <li key={k}>
              <strong>{pathLabel(k, fieldName)}:</strong> {v}
            </li>
          ))}
        </ul>
      )}
    </div>
  );
}
