import { embedMany } from 'ai';
import { modelId, provider, report } from './common.mjs';

await report(async () => {
  const values = ['a sunny day in Paris', 'a rainy night in Oslo', 'a sunny afternoon in Paris'];
  const result = await embedMany({ model: provider.embeddingModel(modelId), values, maxRetries: 0 });
  return { embeddings: result.embeddings, usage: result.usage };
});
