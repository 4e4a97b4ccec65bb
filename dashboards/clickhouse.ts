/**
 * The query of the grafana-clickhouse-datasource plugin (v4) as a Grafana Foundation SDK query
 * type: the SDK ships builders for core data sources only and asks third-party ones to be added
 * this way (a cog.Dataquery variant and its Builder).
 */
import type { Builder, Dataquery } from '@grafana/grafana-foundation-sdk/cog';

// biome-ignore lint/suspicious/noTemplateCurlyInString: a Grafana variable, filled in by Grafana
export const DATASOURCE = { type: 'grafana-clickhouse-datasource', uid: '${datasource}' };

export interface ClickHouseQuery extends Dataquery {
  refId?: string;
  datasource: typeof DATASOURCE;
  editorType: 'sql';
  /** 0: time series, 1: table (the plugin's Format enum). */
  format: 0 | 1;
  queryType: 'timeseries' | 'table';
  rawSql: string;
}

export class ClickHouseQueryBuilder implements Builder<Dataquery> {
  private readonly internal: ClickHouseQuery;

  constructor(rawSql: string, as: 'timeseries' | 'table') {
    this.internal = {
      refId: 'A',
      datasource: DATASOURCE,
      editorType: 'sql',
      format: as === 'timeseries' ? 0 : 1,
      queryType: as,
      rawSql,
      _implementsDataqueryVariant() {},
    };
  }

  refId(refId: string): this {
    this.internal.refId = refId;
    return this;
  }

  build(): ClickHouseQuery {
    return this.internal;
  }
}
